"""Readers: what a server, a log, a scrape or a command line says, as case facts with their sources.

Every reader returns ``SourcedFacts`` (see ``facts``): dotted case paths, each with its value and
where it was read. Readers never decide anything; ``apply_facts`` puts them into a case.
"""
