"""Stand-ins for GitHub's and GitLab's command-line clients, the one part of a CI job out of reach from here.

``gh`` and ``curl`` on a PATH of their own keep a pull request's comments (a merge request's notes) in a JSON file,
as the service would: a POST adds one with the next id, a PATCH or PUT replaces one's body, a GET lists them (``gh
api ... --jq`` as the GitHub template's query selects: the ids of the gate's own comments). Every call is appended
to ``calls``. The CI files' own shell runs unchanged against them.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

GH = r"""#!/usr/bin/env python3
import json, os, sys
store = os.environ["STANDIN_STORE"]
comments = json.load(open(store)) if os.path.exists(store) else []
args = sys.argv[1:]
with open(os.environ["STANDIN_CALLS"], "a") as calls:
    calls.write("gh " + " ".join(args) + "\n")
def save():
    json.dump(comments, open(store, "w"))
if args[:2] == ["pr", "comment"]:
    body = open(args[args.index("--body-file") + 1]).read()
    comments.append({"id": 100 + len(comments), "body": body}); save(); sys.exit(0)
if args[:1] == ["api"] and "--method" in args:
    assert args[args.index("--method") + 1] == "PATCH", args
    cid = int(args[args.index("--method") + 2].rsplit("/", 1)[1])
    field = next(a for a in args if a.startswith("body=@"))
    body = open(field.removeprefix("body=@")).read()
    for c in comments:
        if c["id"] == cid:
            c["body"] = body
    save(); sys.exit(0)
if args[:1] == ["api"] and "--jq" in args:
    assert 'startswith("### scalegate: PR gate")' in args[args.index("--jq") + 1], args
    for c in comments:
        if c["body"].startswith("### scalegate: PR gate"):
            print(c["id"])
    sys.exit(0)
sys.exit(f"gh stand-in: no such call {args}")
"""

CURL = r"""#!/usr/bin/env python3
import json, os, sys, urllib.parse
store = os.environ["STANDIN_STORE"]
notes = json.load(open(store)) if os.path.exists(store) else []
args = sys.argv[1:]
with open(os.environ["STANDIN_CALLS"], "a") as calls:
    calls.write("curl " + " ".join(args) + "\n")
assert any(a.startswith("PRIVATE-TOKEN: ") for a in args), args
url = args[-1]
method = args[args.index("--request") + 1] if "--request" in args else "GET"
if method == "GET":
    print(json.dumps(sorted(notes, key=lambda n: -n["id"])))  # newest first, as sort=desc asks
    sys.exit(0)
field = args[args.index("--data-urlencode") + 1]
body = open(field.removeprefix("body@")).read()
if method == "POST":
    notes.append({"id": 200 + len(notes), "body": body})
elif method == "PUT":
    nid = int(urllib.parse.urlparse(url).path.rsplit("/", 1)[1])
    for n in notes:
        if n["id"] == nid:
            n["body"] = body
json.dump(notes, open(store, "w"))
"""


def install(where: Path, path: str | None = None) -> dict[str, str]:
    """The stand-ins under ``where/bin``; the environment a CI step runs with them first on its PATH (before
    ``path``, else this process's)."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("gh", GH), ("curl", CURL)):
        client = bin_dir / name
        client.write_text(text)
        client.chmod(client.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {
        "PATH": f"{bin_dir}:{path or os.environ.get('PATH', '/usr/bin:/bin')}",
        "STANDIN_STORE": str(where / "comments.json"),
        "STANDIN_CALLS": str(where / "calls"),
    }


def comments(where: Path) -> list[dict]:
    """The comments (or notes) the stand-ins hold now."""
    store = where / "comments.json"
    return json.loads(store.read_text()) if store.exists() else []


def calls(where: Path) -> list[str]:
    path = where / "calls"
    return path.read_text().splitlines() if path.exists() else []
