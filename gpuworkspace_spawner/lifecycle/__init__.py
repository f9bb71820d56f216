"""Pure lifecycle decisions (``decide_*``): workspace state machine, retention, fencing verdict; no I/O."""
