"""Rigid test job: print this host and how many processes of another job (tag given as argv[1]) run in this
host's network namespace (the controller must have given us a host with none left), then sleep argv[2] seconds,
or less once the file argv[3] (if given) exists."""

import json
import os
import socket
import sys
import time

tag = ("MALLEABLE_JOB_TAG=" + sys.argv[1]).encode() + b"\0"
mine = os.stat("/proc/self/ns/net").st_ino
left = []
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        if os.stat(f"/proc/{p}/ns/net").st_ino != mine:
            continue
        with open(f"/proc/{p}/environ", "rb") as f:
            if b"\0" + tag in b"\0" + f.read() + b"\0":
                left.append(int(p))
    except OSError:
        pass
sys.stdout.write(json.dumps({"host": socket.gethostname(), "left": left}) + "\n")
sys.stdout.flush()
deadline = time.monotonic() + (float(sys.argv[2]) if len(sys.argv) > 2 else 0)
release = sys.argv[3] if len(sys.argv) > 3 else None
while time.monotonic() < deadline and not (release and os.path.exists(release)):
    time.sleep(0.1)
