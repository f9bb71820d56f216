"""JupyterLab's "Create Notebook Job" (jupyter-scheduler) backed by the gpuworkspace-jobs API.

A jupyter_server-side package: it runs in the single-user server (the workspace image needs
``jupyter-scheduler``: the ``scheduler`` extra), never in the hub or the services. The backend's
classes are in :mod:`gpuworkspace_spawner.scheduler.backend`; :mod:`.mapping` is pure and imports
nothing of jupyter-scheduler.
"""
