"""Artifacts: the files engineers already have (benchmark results, logs, scrapes, command lines,
``nvidia-smi``), recognised by what they contain and read into one case.

    facts = read_artifacts(["result.json", "server.log", "before.prom", "after.prom"])

Each format is a ``Format`` (a name, what it looks like to a person, ``recognise`` and ``read``)
in ``formats.FORMATS``; its reader lives in ``diagnoser.readers``. Readers never decide; they say
what the file states, with ``file:line`` or ``file key`` as each fact's source.
"""
