"""Derive the sample Backstage catalog (catalog-info.yaml beside this file) from the sample corpus' upstream sources.

Run by hand, never by the pipeline: ``python data/catalog/derive_catalog.py <opentelemetry-demo checkout>
<microservices-demo checkout>``. One Component per service: the OpenTelemetry demo's from ``compose.yaml``
(``dependsOn`` from ``depends_on``), Online Boutique's from ``kubernetes-manifests/*.yaml`` (``dependsOn`` from the
``*_ADDR`` environment variables), in namespace ``online-boutique`` because both systems have a ``frontend``. A
service's title is the first heading of its README when it has one. Both sources are Apache-2.0 (LICENSE files in
data/corpus/otel-demo and data/corpus/online-boutique).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

HEADER = "# Derived by derive_catalog.py from the OpenTelemetry demo's compose.yaml and Online Boutique's manifests.\n"


def readme_title(readme: Path, name: str) -> str:
    if readme.is_file():
        for line in readme.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return name.replace("-", " ").title()


def otel_components(root: Path) -> list[dict]:
    services = yaml.safe_load((root / "compose.yaml").read_text(encoding="utf-8"))["services"]
    components = []
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        components.append({
            "apiVersion": "backstage.io/v1alpha1", "kind": "Component",
            "metadata": {"name": name, "title": readme_title(root / "src" / name / "README.md", name)},
            "spec": {"type": "service", "lifecycle": "production", "system": "otel-demo",
                     **({"dependsOn": [f"component:{d}" for d in sorted(depends)]} if depends else {})},
        })
    return components


def boutique_components(root: Path) -> list[dict]:
    components = []
    deployments = {}
    for manifest in sorted((root / "kubernetes-manifests").glob("*.yaml")):
        for document in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "Deployment":
                deployments[document["metadata"]["name"]] = document
    for name, deployment in deployments.items():
        addresses = [env.get("value", "") for container in deployment["spec"]["template"]["spec"]["containers"]
                     for env in container.get("env", []) if env.get("name", "").endswith("_ADDR")]
        targets = sorted({re.split(r"[:.]", address)[0] for address in addresses} & set(deployments) - {name})
        components.append({
            "apiVersion": "backstage.io/v1alpha1", "kind": "Component",
            "metadata": {"name": name, "namespace": "online-boutique"},
            "spec": {"type": "service", "lifecycle": "production", "system": "online-boutique",
                     **({"dependsOn": [f"component:online-boutique/{t}" for t in targets]} if targets else {})},
        })
    return components


def main(otel_root: str, boutique_root: str) -> None:
    components = otel_components(Path(otel_root)) + boutique_components(Path(boutique_root))
    text = HEADER + "".join("---\n" + yaml.safe_dump(c, sort_keys=False) for c in components)
    (Path(__file__).parent / "catalog-info.yaml").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])
