"""The ``{ledger}`` role: a replication page quotes a number from its chapter's ledger.

``{ledger}`nope/decode/depth0:.1f``` prints the entry ``decode/depth0`` of
``results/nope/reported.json``, formatted ``.1f`` (``norms.majority/...`` reads
``results/norms/majority_reported.json``). An unknown ledger or key is an error, which
the site's build (``-W``) turns into a failed build, so a page prints only numbers its
ledger holds, and the ledger's test, which recomputes every entry from the stored runs,
guards each printed number. The notebooks get the same text from the editions builder
(scripts/myst.py), through the same function, :func:`lncourse.evidence.claims.quote`.
"""

from docutils import nodes


def ledger_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from lncourse.evidence.claims import quote

    try:
        value = quote(text)
    except (KeyError, ValueError, FileNotFoundError) as err:
        message = inliner.reporter.error(str(err).strip('"'), line=lineno)
        problem = inliner.problematic(rawtext, rawtext, message)
        return [problem], [message]
    return [nodes.Text(value)], []


def setup(app):
    app.add_role("ledger", ledger_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
