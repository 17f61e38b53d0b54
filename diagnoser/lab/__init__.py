"""The fault lab: a tiny streaming decode server with switchable faults, to diagnose end to end.

``diagnoser lab serve`` runs it; ``diagnoser lab exercise`` hides a fault in it for a trainee;
``bench/bench_lab.py`` diagnoses every fault with the normal probes, traces and rules. Needs
the ``lab`` and ``gpu`` extras (fastapi, uvicorn, prometheus-client; torch).
"""
