"""The documentation site's generated pages (``python -m docsgen``): troubleshooting, concepts,
reference and measurements, each made from the code or data it describes. The pages are committed;
``python -m docsgen --check`` (run by ``make lint``) and tests/test_docs.py fail when one is stale."""
