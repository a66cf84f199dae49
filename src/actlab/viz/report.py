"""Report pages: one structure rendered to both markdown and a self-contained-looking HTML page.

Sections hold headings, paragraphs, tables, images and videos (relative paths, with captions) and links.
Rendering both formats from the same structure avoids a markdown parser dependency and keeps the two in
step.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from actlab.utils.io import atomic_write_text
from actlab.utils.table import fmt
from actlab.utils.table import table as md_table


@dataclass
class _Block:
    kind: str  # heading | paragraph | table | image | video | links | code
    data: dict = field(default_factory=dict)


@dataclass
class Report:
    """A report page built block by block, written as ``report.md`` and ``report.html``."""

    title: str
    blocks: list[_Block] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(_Block("heading", {"text": text, "level": level}))

    def paragraph(self, text: str) -> None:
        self.blocks.append(_Block("paragraph", {"text": text}))

    def table(self, rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
        self.blocks.append(_Block("table", {"rows": [list(r) for r in rows], "headers": list(headers)}))

    def image(self, path: str, caption: str) -> None:
        """``path`` relative to the report's directory."""
        self.blocks.append(_Block("image", {"path": path, "caption": caption}))

    def video(self, path: str, caption: str, poster: str | None = None) -> None:
        """An mp4 (``path`` relative to the report's directory): a player in the HTML page (muted, looping,
        with controls), a link in the markdown; both with the caption and a link to the file. ``poster``:
        an image shown before it plays (and in the markdown, linking to the video) instead of frame 0."""
        self.blocks.append(_Block("video", {"path": path, "caption": caption, "poster": poster}))

    def links(self, items: Sequence[tuple[str, str]]) -> None:
        """A bullet list of (label, relative path) links."""
        self.blocks.append(_Block("links", {"items": list(items)}))

    def code(self, text: str) -> None:
        self.blocks.append(_Block("code", {"text": text}))

    # -- rendering -----------------------------------------------------------------------------------
    def to_markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            d = b.data
            if b.kind == "heading":
                out += ["#" * d["level"] + " " + d["text"], ""]
            elif b.kind == "paragraph":
                out += [d["text"], ""]
            elif b.kind == "table":
                out += [md_table(d["rows"], d["headers"], markdown=True), ""]
            elif b.kind == "image":
                out += [f"![{d['caption']}]({d['path']})", "", f"*{d['caption']}*", ""]
            elif b.kind == "video":
                if d.get("poster"):
                    out += [f"[![{d['caption']}]({d['poster']})]({d['path']})", "", f"*{d['caption']}*", ""]
                else:
                    out += [f"[video: {d['caption']}]({d['path']})", ""]
            elif b.kind == "links":
                out += [f"- [{label}]({path})" for label, path in d["items"]] + [""]
            elif b.kind == "code":
                out += ["```", d["text"].rstrip("\n"), "```", ""]
        return "\n".join(out)

    def to_html(self) -> str:
        e = html.escape
        body = [f"<h1>{e(self.title)}</h1>"]
        for b in self.blocks:
            d = b.data
            if b.kind == "heading":
                level = min(max(d["level"], 2), 4)
                body.append(f"<h{level}>{e(d['text'])}</h{level}>")
            elif b.kind == "paragraph":
                body.append(f"<p>{e(d['text'])}</p>")
            elif b.kind == "table":
                head = "".join(f"<th>{e(h)}</th>" for h in d["headers"])
                rows = "".join(
                    "<tr>" + "".join(f"<td>{e(fmt(c))}</td>" for c in r) + "</tr>" for r in d["rows"]
                )
                table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
                body.append(f'<div class="table">{table}</div>')
            elif b.kind == "image":
                body.append(
                    f'<figure><img src="{e(d["path"])}" alt="{e(d["caption"])}">'
                    f"<figcaption>{e(d['caption'])}</figcaption></figure>"
                )
            elif b.kind == "video":
                # playsinline + muted: mobile browsers autoplay-block or full-screen a video otherwise
                src = e(d["path"])
                poster = f' poster="{e(d["poster"])}"' if d.get("poster") else ""
                body.append(
                    f'<figure><video controls muted loop playsinline preload="metadata"{poster} src="{src}">'
                    "</video>"
                    f'<figcaption>{e(d["caption"])} (<a href="{src}">mp4</a>)</figcaption></figure>'
                )
            elif b.kind == "links":
                items = "".join(f'<li><a href="{e(p)}">{e(label)}</a></li>' for label, p in d["items"])
                body.append(f"<ul>{items}</ul>")
            elif b.kind == "code":
                body.append(f"<pre>{e(d['text'])}</pre>")
        return _HTML_TEMPLATE.format(title=e(self.title), body="\n".join(body))

    def write(self, out_dir: str | Path, stem: str = "report") -> tuple[Path, Path]:
        """Write ``<stem>.md`` and ``<stem>.html`` atomically; returns both paths."""
        out_dir = Path(out_dir)
        md, page = out_dir / f"{stem}.md", out_dir / f"{stem}.html"
        atomic_write_text(md, self.to_markdown())
        atomic_write_text(page, self.to_html())
        return md, page


_HTML_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }}
div.table {{ overflow-x: auto; margin: 1em 0; }}
table {{ border-collapse: collapse; font-size: 0.92em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }}
th {{ background: #f3f3f3; }}
figure {{ margin: 1.2em 0; }}
img, video {{ max-width: 100%; border: 1px solid #ddd; }}
figcaption {{ color: #555; font-size: 0.9em; }}
pre {{ background: #f6f6f6; padding: 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; }}
</style></head>
<body>
{body}
</body></html>
"""
