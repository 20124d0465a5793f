"""Internal link check of the built HTML: every relative link names a file that exists and,
with ``#anchor``, an element with that id. External links (``http:``, ``https:``,
``mailto:``) are not fetched: the build needs no network.
"""
from __future__ import annotations

import os
from html.parser import HTMLParser
from typing import Dict, List, Set, Tuple
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: Set[str] = set()
        self.links: List[Tuple[str, str]] = []      # (attribute, url)

    def handle_starttag(self, tag, attrs) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if value and ((tag == "a" and name == "href") or
                          (tag in ("img", "script") and name == "src") or
                          (tag == "link" and name == "href")):
                self.links.append((f"<{tag} {name}>", value))


def _parse(path: str) -> _Page:
    page = _Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    return page


def check(html_dir: str) -> List[str]:
    """Broken internal links of the site in ``html_dir``, one line each (empty: none)."""
    pages: Dict[str, _Page] = {}
    for root, _dirs, files in os.walk(html_dir):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(root, name)
                pages[os.path.normpath(path)] = _parse(path)
    problems = []
    for path, page in sorted(pages.items()):
        rel = os.path.relpath(path, html_dir)
        for attr, url in page.links:
            parts = urlsplit(url)
            if parts.scheme or url.startswith("//"):
                continue                     # external: not fetched
            target = path if not parts.path else os.path.normpath(
                os.path.join(os.path.dirname(path), unquote(parts.path)))
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            if not os.path.exists(target):
                problems.append(f"{rel}: {attr} {url}: no file {os.path.relpath(target, html_dir)}")
                continue
            if parts.fragment and target.endswith(".html"):
                ids = pages[os.path.normpath(target)].ids if os.path.normpath(target) in pages \
                    else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{rel}: {attr} {url}: no anchor #{parts.fragment} in "
                                    f"{os.path.relpath(target, html_dir)}")
    return problems


