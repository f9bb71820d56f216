"""devcluster: a local simulated Kubernetes cluster for the demo and the tests.

Its own distribution (``devcluster/``, ``gpuworkspace-devcluster``): the spawner never imports it and
its wheel never ships it (an import-linter contract and tests/test_packaging.py enforce both).
"""

__version__ = "0.1.0.dev0"
