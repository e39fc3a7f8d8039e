from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
    verbose_name = "Orchestration engine"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core import checks
        from django_q.signals import post_spawn

        from orchestrator.engine.run_settings import check_defaults
        from orchestrator.engine.ticker import start_ticker

        post_spawn.connect(start_ticker, dispatch_uid="glassbox-ticker")
        checks.register(check_defaults)
