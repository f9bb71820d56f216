"""The disk admin service ``gpuworkspace-disks``: list, resize, snapshot, restore and reclaim workspace disks.

A JupyterHub service (JSON REST under ``/services/gpuworkspace-disks/api/v1``, docs/reference/disk-api.md):
``app`` holds the tornado handlers and ``main``, ``access`` the pure authorization rules, ``views`` the
pure API representation, ``operations`` the orchestration over :mod:`gpuworkspace_spawner.k8s.storage`,
and ``metrics`` the capacity alert metrics from the kubelets' volume stats.
"""
