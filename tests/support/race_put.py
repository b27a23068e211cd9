"""Race helper: put_if_absent on many names at an agreed moment; prints what this process won.

python -m tests.support.race_put URI OPTIONS_JSON WRITER_ID START_EPOCH COUNT
"""

from __future__ import annotations

import json
import sys
import time

from carbonlite.storage import open_storage


def main() -> None:
    uri, options, writer, start, count = sys.argv[1:6]
    storage, root = open_storage(uri, json.loads(options) or None)
    paths = [storage.join(root, f"race-{i:04d}.json") for i in range(int(count))]
    delay = float(start) - time.time()
    if delay > 0:
        time.sleep(delay)
    won = [i for i, p in enumerate(paths) if storage.put_if_absent(p, writer.encode())]
    print(json.dumps(won))


if __name__ == "__main__":
    main()
