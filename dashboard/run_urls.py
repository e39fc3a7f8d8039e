"""URLs of one run's glass-box page and its actions (included under runs/<run_id>/)."""

urlpatterns: list = []
