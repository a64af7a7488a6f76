"""The benchmarks index's table of every measured figure (benchmarks/README.md): its heading and its rows' cells,
read by the figure checks (tools.published_figures) and the staleness report (tools.stale_figures)."""

from __future__ import annotations

TABLE_HEADING = "## Every measured figure, with its command and commit"


def table_rows(page: str) -> list[list[str]]:
    """The cells of each body row of the table under :data:`TABLE_HEADING` (its header and rule left out)."""
    if TABLE_HEADING not in page:
        return []
    lines = page[page.index(TABLE_HEADING):].splitlines()
    rows: list[list[str]] = []
    in_table = False
    for line in lines[1:]:
        if line.startswith("|"):
            in_table = True
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif in_table or line.startswith("## "):
            break
    return rows[1:]  # the first row is the header
