import pytest


@pytest.fixture
def loaded(db):
    """The shipped fixtures synced into the test database and served by the catalog."""
    from django.core.cache import cache

    from agents_app.catalog import catalog, sync_files

    cache.clear()
    result = sync_files()
    catalog.reload()
    yield result
    cache.clear()
