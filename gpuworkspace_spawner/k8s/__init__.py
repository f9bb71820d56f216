"""The one Kubernetes gateway: the only package that imports kubernetes_asyncio."""
