"""``python -m gpuworkspace_devcluster up ...``: the ``gpuworkspace-devcluster`` command."""

import sys

from .cli import main

sys.exit(main())
