"""Jobs handed off from a workspace to the cluster's queue (issue 17): pure builders and decisions.

``manifests`` builds the code snapshot, the claim restored from it and the Kueue-queued batch/v1 Job;
``submission`` checks what a user asks for; ``state`` tells a job's state, in plain words, from the
Job and Kueue's Workload. The service that does the I/O is ``services/jobs``.
"""
