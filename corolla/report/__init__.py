"""``corolla report``: the leaderboards of the five papers' headline tables beside Corolla's results,
a page per method and per run, as a static site (HTML, CSS, PNG; no server, no JavaScript) and a
Markdown overview (``docs/leaderboard.md``). Flower-free."""
