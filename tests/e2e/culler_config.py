"""The idle culler's configuration in the e2e stack (conftest.py passes it as ``GPUWS_CULLER_CONFIG``).

Only the ``e2e-cull*`` profiles of catalog-extra.yaml are ever culled, on a timescale of seconds, so
that the other e2e tests' servers are never warned nor stopped. ``test_culler.py`` reads these values
back from the running culler (``api/v1/status``). The cycle's interval comes from
``GPUWS_CULLER_INTERVAL``: the hub's registration passes it on the command line, which wins.
"""

c = get_config()  # noqa: F821 - traitlets defines it when it loads this file

c.CullerApp.idle_timeout = 0  # never: every profile but the ones below
c.CullerApp.idle_timeout_by_profile = {
    "e2e-cull": 30,
    "e2e-cull-gpu": 30,
    "e2e-cull-exempt": 30,  # what would apply but for the exemption
    "e2e-cull-team": 20,  # test_jobs.py: the workspace a notebook job was submitted from, culled meanwhile
    "gpu-shared": 0,  # the shipped time-sliced profile (other tests' servers): never, over its mode's
}
# the ceiling for time-sliced workspaces: e2e-cull-shared's card sets warnings but no idle timeout
c.CullerApp.idle_timeout_by_gpu_mode = {"time-sliced": 36}
c.CullerApp.max_duration_by_profile = {"e2e-cull-max": 45}
c.CullerApp.exempt_profiles = {"e2e-cull-exempt"}
c.CullerApp.warn_before = [16, 8]  # two stages, for every profile without lead times of its own
# e2e-cull-card is named nowhere here: its catalog session (36 s idle, warned 20 s and 6 s before)
# applies, as its spawn card shows
c.CullerApp.gpu_busy_percent = 10
c.CullerApp.timeout = 5
# checkpoints of open notebooks before a stop (test_culler.py: the hostile server sees them too)
c.CullerApp.save_first = True
# a process busy in a silent terminal (a third of a core) is activity; an idle server is far below it
c.CullerApp.cpu_busy_cores = 0.1
