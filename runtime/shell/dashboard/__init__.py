"""The browser dashboard under ``/ui`` on the daemon's HTTP port (docs/dashboard.md):
:mod:`.app` (pages and actions), :mod:`.security` (login codes, sessions, CSRF, headers),
:mod:`.backend` (what the pages read and change), :mod:`.charts` (the pictures),
:mod:`.http` (the ASGI pieces), :mod:`.cli` (``atomic-agent ui``).
"""
