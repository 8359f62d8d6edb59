"""Test program for the controller: writes a deterministic file to an adhocfs and checks it back.

Usage: fs_writer.py META PATH SIZE SEED MARKS. Appends ``PATH`` to the MARKS file once it starts (to count starts),
then writes SIZE bytes of ``random.Random(SEED)`` to PATH and reads them back; a write refused while a data server
is down (it has not been declared lost yet) is retried for up to 30 s, as an application with a checkpoint would.
The file system's secret comes from the job's key file (``$XDG_CONFIG_HOME/malleable/token``): the controller
passes no secret in a job's environment.
"""

import random
import sys
import time

from malleable.adhocfs import connect

meta, path, size, seed, marks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
with open(marks, "a") as f:
    f.write(path + "\n")
data = random.Random(seed).randbytes(size)
deadline = time.monotonic() + 30
with connect(meta, timeout=2.0) as fs:
    while True:
        try:
            with fs.open(path, "wb") as f:
                f.write(data)
            with fs.open(path, "rb") as f:
                assert f.read() == data, "read back differs"
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise
            print(f"retrying {path}: {e}", flush=True)
            time.sleep(0.5)
print(f"wrote {path}", flush=True)
