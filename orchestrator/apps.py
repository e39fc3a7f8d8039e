from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
    verbose_name = "Orchestration engine"
    default_auto_field = "django.db.models.BigAutoField"
