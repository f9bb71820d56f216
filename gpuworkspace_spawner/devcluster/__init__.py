"""devcluster: a local simulated Kubernetes cluster for the demo and the tests.

Production modules never import this package (an import-linter contract enforces it).
"""
