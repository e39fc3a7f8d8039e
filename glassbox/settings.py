"""Glassbox settings.

Everything a deployment changes comes from environment variables. With none set, Glassbox
runs on the embedded default: SQLite (WAL, immediate transactions), the django-q2 ORM broker
and an in-process channel layer. Setting DATABASE_URL and REDIS_URL switches to the
production profile (PostgreSQL, the django-q2 Redis broker, channels_redis).
"""

import os
from decimal import Decimal
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from glassbox.env import env_bool, env_choice, env_decimal, env_float, env_int

BASE_DIR = Path(__file__).resolve().parent.parent


DEFAULT_SECRET_KEY = "glassbox-insecure-development-key-change-me"
SECRET_KEY = os.environ.get("SECRET_KEY", DEFAULT_SECRET_KEY)
DEBUG = env_bool("DEBUG", True)
if not DEBUG and SECRET_KEY == DEFAULT_SECRET_KEY:
    raise ImproperlyConfigured("DEBUG is off but SECRET_KEY is the built-in development key: set SECRET_KEY.")

ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
# A form post that fails the CSRF check is refused with Django's page and audited (access.denied).
CSRF_FAILURE_VIEW = "dashboard.permissions.csrf_failure"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    # Before django_q: its `qcluster` command is orchestrator's (a graceful shutdown on SIGTERM).
    "orchestrator",
    "django_q",
    "ninja",  # serves the API docs' Swagger UI from our own static files (CSP: no CDN)
    "csp",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "glassbox.urls"
ASGI_APPLICATION = "glassbox.asgi.application"
WSGI_APPLICATION = "glassbox.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
# SQLite needs immediate transactions and WAL, or django-q2's monitor and our scheduler hit
# "database is locked" under concurrent workers (DESIGN §8).
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    default_db = dj_database_url.parse(DATABASE_URL, conn_max_age=0)
    if default_db["ENGINE"] == "django.db.backends.postgresql":
        # Server-side binding with prepared statements: psycopg prepares a statement the second
        # time a connection runs it, so the scheduler's steps, which repeat the same few dozen
        # statements, skip PostgreSQL's parse and plan (about 10 % of a chain's step,
        # docs/benchmarks.md). Django turns them off by default for connection poolers:
        # GLASSBOX_PG_PREPARED_STATEMENTS=0 behind a pooler that does not support them.
        if os.environ.get("GLASSBOX_PG_PREPARED_STATEMENTS", "1") != "0":
            default_db.setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=2)
else:
    default_db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("GLASSBOX_SQLITE_PATH", str(BASE_DIR / "glassbox.sqlite3")),
    }
if default_db["ENGINE"] == "django.db.backends.sqlite3":
    default_db["OPTIONS"] = {**SQLITE_OPTIONS, **default_db.get("OPTIONS", {})}
    # Tests need a file database (not :memory:) so that real worker processes share it.
    default_db.setdefault("TEST", {})
    default_db["TEST"].setdefault(
        "NAME", os.environ.get("GLASSBOX_TEST_SQLITE_PATH", str(BASE_DIR / ".test-glassbox.sqlite3"))
    )
DATABASES = {"default": default_db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Queue, channels, rate limiter -----------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
# Prefix for every Redis key this deployment writes (tests set their own and clean up).
REDIS_PREFIX = os.environ.get("GLASSBOX_REDIS_PREFIX", "glassbox")

# Longest per-task timeout an agent or subtask may ask for. q2's own timeout sits above it so
# that our cooperative timeout always fires first; q2's retry sits above that (timeout < retry).
GLASSBOX_MAX_TASK_TIMEOUT_S = 3600

Q_CLUSTER = {
    "name": os.environ.get("GLASSBOX_Q_NAME", "glassbox"),
    "workers": env_int("GLASSBOX_WORKERS", 2, minimum=1),
    # A worker process hosts many attempts at once (orchestrator/engine/host.py); recycling it
    # drains its host first (finish or hand back), so it is done rarely.
    "recycle": 100_000,
    "timeout": GLASSBOX_MAX_TASK_TIMEOUT_S + 60,
    "retry": GLASSBOX_MAX_TASK_TIMEOUT_S + 120,
    # Our leases, attempts and reaper are the delivery guarantee: q2 must never retry alone.
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    "save_limit": 250,
    "poll": 0.1,
    "label": "Task queue",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
    # The ORM broker, whose idle clusters are woken when a task is queued instead of finding it
    # at their next poll (orchestrator/orm_broker.py).
    Q_CLUSTER["broker_class"] = "orchestrator.orm_broker.DoorbellORM"

# channels_redis reads a channel with a blocking BZPOPMIN of 5 s; redis-py's default socket
# timeout is also 5 s, so every idle read raced the socket timeout and lost ("Timeout reading
# from ...", the websocket closed with 1011). The socket timeout must sit well above the block.
CHANNEL_LAYER_SOCKET_TIMEOUT_S = 15
# A member of a run's group that is not renewed within this long is dropped from the group: the
# live view's broadcaster renews its membership every third of it (dashboard/broadcast.py), so
# only the channels of a daphne that died linger, and not for channels_redis's default 24 h
# (each doorbell to them logged "channels over capacity" once they filled up).
CHANNEL_LAYER_GROUP_EXPIRY_S = 90
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT_S,
                        "socket_connect_timeout": 3,
                    }
                ],
                "prefix": f"{REDIS_PREFIX}:asgi",
                "group_expiry": CHANNEL_LAYER_GROUP_EXPIRY_S,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Where the shared rate limiter keeps its counters: the database by default, Redis when set.
GLASSBOX_RATE_LIMIT_STORAGE = env_choice(
    "GLASSBOX_RATE_LIMIT_STORAGE", "redis" if REDIS_URL else "database", ("database", "redis")
)

# --- Engine defaults (DESIGN §3), each overridable per run, agent or subtask -----------------
GLASSBOX_DEFAULT_CAP = env_int("GLASSBOX_DEFAULT_CAP", 4, minimum=1)
GLASSBOX_DEFAULT_TIMEOUT_S = env_int("GLASSBOX_DEFAULT_TIMEOUT_S", 30, minimum=1)
GLASSBOX_DEFAULT_MAX_RETRIES = env_int("GLASSBOX_DEFAULT_MAX_RETRIES", 3, minimum=0)
GLASSBOX_DEFAULT_BUDGET_USD = str(env_decimal("GLASSBOX_DEFAULT_BUDGET_USD", "0.50", minimum=Decimal("0")))
GLASSBOX_SUMMARY_TOKENS = env_int("GLASSBOX_SUMMARY_TOKENS", 200, minimum=1)
# Does a run wait for its plan's approval when its launcher does not say? `auto`: when more than
# one active person may approve (orchestrator.engine.run_settings.default_plan_approval).
GLASSBOX_PLAN_APPROVAL_DEFAULT = env_choice("GLASSBOX_PLAN_APPROVAL_DEFAULT", "auto", ("auto", "always", "never"))
# A running attempt holds a lease this long and renews it every third of it.
GLASSBOX_LEASE_S = env_float("GLASSBOX_LEASE_S", 15.0, minimum=0)
# Retry backoff: base * 2**(attempt-1), capped, with full jitter.
GLASSBOX_RETRY_BASE_S = env_float("GLASSBOX_RETRY_BASE_S", 1.0, minimum=0)
GLASSBOX_RETRY_MAX_S = env_float("GLASSBOX_RETRY_MAX_S", 30.0, minimum=0)
# Attempts of a task's start that may be lost with their worker (killed, or stalled past its lease)
# before the task fails: a lost attempt is not the task's fault and spends none of its retries,
# but a task that kills its worker every time must not be retried for ever.
GLASSBOX_MAX_LOST_ATTEMPTS = env_int("GLASSBOX_MAX_LOST_ATTEMPTS", 3, minimum=1)
# An admitted attempt that no worker claimed after this long is handed to the broker again (the
# Redis broker loses a task whose worker dies; a process can die between commit and enqueue).
# A second delivery is harmless: only one claim of an attempt can succeed.
GLASSBOX_QUEUED_GRACE_S = env_float("GLASSBOX_QUEUED_GRACE_S", 60.0, minimum=0)
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
# Where the anthropic provider and the planner send requests (empty: the public API). Point it
# at `manage.py fake_anthropic` for offline demos; tests point it at their own fake server.
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
# The Claude model of `seed_demo --provider anthropic` and of the planner. claude-sonnet-4-5 (the
# earlier default) reaches end-of-life on 2026-11-30 (the SDK's list of deprecated models).
GLASSBOX_MODEL = os.environ.get("GLASSBOX_MODEL", "claude-sonnet-4-6")

# --- Tools: MCP tool servers (DESIGN §10) ------------------------------------------------------
# Each run's working directory (a stdio tool server's cwd, the demo workspace, the run's artifacts)
# is GLASSBOX_ARTIFACTS_DIR/run-<id>/.
GLASSBOX_ARTIFACTS_DIR = Path(os.environ.get("GLASSBOX_ARTIFACTS_DIR", str(BASE_DIR / "artifacts")))
# A tool call that takes longer fails (the model is told); a server that does not answer its
# handshake within the start timeout fails the calls made to it.
GLASSBOX_TOOL_CALL_TIMEOUT_S = env_float("GLASSBOX_TOOL_CALL_TIMEOUT_S", 30.0, minimum=0.1)
GLASSBOX_TOOL_START_TIMEOUT_S = env_float("GLASSBOX_TOOL_START_TIMEOUT_S", 20.0, minimum=0.1)
# What the model receives of one tool result, in characters (the rest is cut, and said so).
GLASSBOX_TOOL_RESULT_MAX_CHARS = env_int("GLASSBOX_TOOL_RESULT_MAX_CHARS", 16_000, minimum=100)

# --- Auth, i18n, static ----------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# The admin's dates and times as the pages give them: "2026-11-28 15:00:57 UTC" (glassbox/formats/en/).
FORMAT_MODULE_PATH = ["glassbox.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # A tool server's stray output may hold its secrets: the mcp SDK's log of it is reworded.
    "filters": {"tool_server_output": {"()": "glassbox.log_filters.HideToolServerOutput"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django-q": {"level": os.environ.get("Q_LOG_LEVEL", "WARNING")},
        "mcp.client.stdio": {"filters": ["tool_server_output"]},
    },
}

# Django's cache is shared across processes (django-q2 keeps cluster stats in it, so that
# `launch` can tell whether a qcluster is running): a database table by default, Redis when set.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": f"{REDIS_PREFIX}:cache",
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "glassbox_cache",
        }
    }

# Each qcluster worker process runs the reaper's tick this often (seconds; 0 turns it off and
# leaves only the once-a-minute q2 Schedule).
GLASSBOX_TICK_S = env_float("GLASSBOX_TICK_S", 1.0, minimum=0)

# Adaptive concurrency grows a provider's effective cap back up to its configured max_in_flight,
# or up to this when none is configured (then the cap is lifted again).
GLASSBOX_ADAPTIVE_CEILING = env_int("GLASSBOX_ADAPTIVE_CEILING", 64, minimum=1)

# A worker that finishes a task runs one newly admitted task itself instead of waiting for the
# broker to hand it out (saves a broker round trip per hop on chains).
GLASSBOX_CLAIM_NEXT = env_bool("GLASSBOX_CLAIM_NEXT", True)

# The agent host of each worker process (orchestrator/engine/host.py): how many attempts it runs at
# once, how many database threads serve them, how often running attempts save their output and
# usage, and how long a stopping worker lets its attempts finish before handing them back (keep
# it below GLASSBOX_LEASE_S: a lease expiring first would make the reaper retry them as lost).
GLASSBOX_SLOTS_PER_WORKER = env_int("GLASSBOX_SLOTS_PER_WORKER", 50, minimum=1)
GLASSBOX_HOST_DB_THREADS = env_int("GLASSBOX_HOST_DB_THREADS", 4, minimum=1)
GLASSBOX_PROGRESS_SAVE_S = env_float("GLASSBOX_PROGRESS_SAVE_S", 2.0 if REDIS_URL else 1.0, minimum=0.1)
GLASSBOX_DRAIN_S = env_float("GLASSBOX_DRAIN_S", 10.0, minimum=0)
# On PostgreSQL, the agent hosts' connections commit without waiting for the WAL to reach the disk
# (`synchronous_commit`): the durability the embedded profile's SQLite has (WAL, synchronous=NORMAL).
# A crash of the database server itself (not of a worker) can then lose the hosts' last ~0.6 s of
# commits, which the engine redoes as it redoes a killed worker's attempts; waiting for the disk
# cost every attempt's end ~4 ms on this project's machines (docs/deploy.md). `on` waits.
GLASSBOX_HOST_SYNCHRONOUS_COMMIT = env_choice(
    "GLASSBOX_HOST_SYNCHRONOUS_COMMIT", "off", ("off", "on", "local", "remote_write", "remote_apply")
)

# --- Security (DESIGN §6) ---------------------------------------------------------------------
# GLASSBOX_HTTPS=1 when the site is served over HTTPS: HTTP is redirected, HSTS is sent and the
# session and CSRF cookies travel over HTTPS only. Behind a proxy that ends TLS, also set
# GLASSBOX_BEHIND_PROXY=1 so that its X-Forwarded-Proto header counts (else every request looks
# like HTTP and is redirected forever). `manage.py check --deploy` is clean with DEBUG off,
# SECRET_KEY set and GLASSBOX_HTTPS=1.
GLASSBOX_HTTPS = env_bool("GLASSBOX_HTTPS", False)
SECURE_SSL_REDIRECT = GLASSBOX_HTTPS
# Load balancers probe each instance's /health/ over plain HTTP, bypassing the TLS proxy.
SECURE_REDIRECT_EXEMPT = [r"^health/$"]
SESSION_COOKIE_SECURE = GLASSBOX_HTTPS
CSRF_COOKIE_SECURE = GLASSBOX_HTTPS
SECURE_HSTS_SECONDS = env_int("GLASSBOX_HSTS_SECONDS", 31_536_000, minimum=0) if GLASSBOX_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("GLASSBOX_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("GLASSBOX_HSTS_PRELOAD", True)
if env_bool("GLASSBOX_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"

# Content-Security-Policy (django-csp 4 format): scripts, styles, images, fonts and connections
# (the run page's websocket included) from our own origin only; no inline script or style, no
# eval, no plugins, no framing. Every script is vendored under static/ (the API docs' Swagger UI
# comes from django-ninja's static files). `data:` images are Swagger UI's icons.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Request sizes. A plan document is at most 5 MB (plans.MAX_PLAN_BYTES); sent inside a JSON API
# body its text can grow by escaping (a newline is two characters), so API bodies may be up to
# 11 MB before Django refuses them (the API answers 413 with a JSON error). An uploaded plan
# file up to 6 MB stays in memory; the plan's own size check refuses anything over 5 MB.
DATA_UPLOAD_MAX_MEMORY_SIZE = 11 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 6 * 1024 * 1024

# Separation of duties: the person who launched a run cannot approve its plan checkpoint
# (orchestrator/engine/decisions.py decide()). On by default; 0 turns it off (e.g. a one-person install).
GLASSBOX_SEPARATION_OF_DUTIES = env_bool("GLASSBOX_SEPARATION_OF_DUTIES", True)
