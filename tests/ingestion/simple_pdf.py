"""A few-line PDF writer for reader tests: text lines in Helvetica, ruled tables (a rectangle per cell, as
word processors draw them) and an outline, written by hand so the tests need no PDF library or LibreOffice."""

from __future__ import annotations

from collections.abc import Sequence


def text(x: float, y: float, line: str, size: int = 11) -> str:
    """Drawing operators for one line of text at (x, y), in points from the bottom left."""
    escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return f"BT /F1 {size} Tf {x} {y} Td ({escaped}) Tj ET"


def ruled_table(
    x: float, top: float, rows: Sequence[Sequence[str | None]], widths: Sequence[float], height: float = 20
) -> list[str]:
    """Drawing operators for a table with a ruled box around every cell; a cell of None is covered by the cell
    before it in its row (a merged cell: one box, no rule between)."""
    ops: list[str] = []
    for r, row in enumerate(rows):
        y = top - (r + 1) * height
        left = x
        for c, cell in enumerate(row):
            if cell is None:
                left += widths[c]
                continue
            span = 1 + next((i for i, c2 in enumerate(row[c + 1 :]) if c2 is not None), len(row) - c - 1)
            width = sum(widths[c : c + span])
            ops.append(f"{left} {y} {width} {height} re S")
            if cell:
                ops.append(text(left + 5, y + 6, cell))
            left += widths[c]
    return ops


def pdf(pages: Sequence[Sequence[str]], outline: Sequence[tuple[str, int, float]], title: str) -> bytes:
    """A PDF of Letter pages drawn by ``pages`` (operators of ``text``/``ruled_table``), with a flat outline of
    (heading, 0-based page, y) and a document title."""
    objects: dict[int, str] = {}
    page_ids = [5 + 2 * i for i in range(len(pages))]
    objects[1] = "<< /Type /Catalog /Pages 2 0 R /Outlines 3 0 R >>"
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(f'{i} 0 R' for i in page_ids)}] /Count {len(pages)} >>"
    objects[4] = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    for page_id, ops in zip(page_ids, pages, strict=True):
        stream = "\n".join(ops)
        objects[page_id] = (
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 4 0 R >> >> /Contents {page_id + 1} 0 R >>"
        )
        objects[page_id + 1] = f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream"
    first = 5 + 2 * len(pages)
    ids = [first + k for k in range(len(outline))]
    for k, (heading, page, y) in enumerate(outline):
        links = (f" /Prev {ids[k - 1]} 0 R" if k else "") + (f" /Next {ids[k + 1]} 0 R" if k + 1 < len(ids) else "")
        objects[ids[k]] = f"<< /Title ({heading}) /Parent 3 0 R{links} /Dest [{page_ids[page]} 0 R /XYZ 0 {y} 0] >>"
    objects[3] = f"<< /Type /Outlines /First {ids[0]} 0 R /Last {ids[-1]} 0 R /Count {len(ids)} >>"
    info = first + len(outline)
    objects[info] = f"<< /Title ({title}) >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += f"{number} 0 obj\n{objects[number]}\nendobj\n".encode("latin-1")
    xref, size = len(out), max(objects) + 1
    out += f"xref\n0 {size}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offsets[n]:010d} 00000 n \n" for n in range(1, size)).encode()
    out += f"trailer\n<< /Size {size} /Root 1 0 R /Info {info} 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)
