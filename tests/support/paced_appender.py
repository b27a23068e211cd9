"""A process that appends ``step`` rows of the next ids to a table every 30 ms until a stop
file exists, the way an outside writer races a stream: it writes its commit count to
``count_file`` after each commit and ends once ``stop_file`` exists.

    python -m tests.support.paced_appender PATH FIRST_ID STEP COUNT_FILE STOP_FILE
"""

from __future__ import annotations

import os
import sys
import time

from carbonlite import open_table
from tests.support.spark_data import source_rows


def main() -> None:
    path, first, step, count_file, stop_file = sys.argv[1:6]
    table, commits = open_table(path), 0
    while not os.path.exists(stop_file):
        table.append(source_rows(int(first) + commits * int(step), int(step)))
        commits += 1
        tmp = count_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(commits))
        os.replace(tmp, count_file)
        time.sleep(0.03)


if __name__ == "__main__":
    main()
