"""``t3orch web [--open]``: a one-time login URL for the daemon's web page."""

from __future__ import annotations

import argparse
import json
import sys
import webbrowser
from collections.abc import Callable

from t3orch.cli.client import ApiClient
from t3orch.cli.clientcmds import run_client


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = sub.add_parser(
        "web", help="print a one-time login URL for the web page (--open: open it in a browser)"
    )
    common(p)
    p.add_argument("--open", action="store_true", help="open the URL in the default browser")
    p.set_defaults(handler=lambda args: run_client(args, cmd_web))


async def cmd_web(client: ApiClient, args: argparse.Namespace) -> int:
    login = await client.call("web.login")
    url = str(login["url"])
    if args.json:
        print(json.dumps({"url": url, "expiresInS": login["expiresInS"]}))
    else:
        print(url)
        print(
            f"(one visit, within {login['expiresInS']:g} s; the browser then stays logged in "
            "until the api-token changes)",
            file=sys.stderr,
        )
    if args.open and not webbrowser.open(url):
        print("t3orch web: no browser could be opened; visit the URL above", file=sys.stderr)
        return 1
    return 0
