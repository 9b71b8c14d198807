"""``python -m pyzyme.rules``: the size of the default rule table, by kind of row."""

from collections import Counter

from pyzyme.rules import default_rules

table = default_rules()
rows = list(table.rows())
names = sum(len(row.names) for row in rows)
kinds = Counter(type(row).__name__ for row in rows)
print(f"{len(rows)} rows answering to {names} names: "
      + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())))
