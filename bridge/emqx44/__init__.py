"""`hookbridge import-emqx DIR --out DIR`: EMQX 4.4 Enterprise's `etc/plugins/emqx_backend_<db>.conf`
files turned into a hookbridge `config/bridge.conf` and `rules/<db>.conf` (docs/migrate-from-emqx44.md).

importer.py does the work (pure: files in, texts and problems out); cli.py is the sub-command, which
joins the CLI through the `hookbridge.commands` entry point group like any other.
"""
