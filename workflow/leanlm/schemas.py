"""The JSON schemas of the params files (workflow/schemas/) and the messages their violations give:
``key models.bert.n_heads = 'x': 'x' is not of type 'integer'``, with the file named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from leanlm import paths
from leanlm.errors import ConfigError
from leanlm.io import read_yaml


def schema(name: str) -> dict:
    path = paths.project_file("workflow", "schemas", name)  # ConfigError naming it where there is no project
    return json.loads(path.read_text(encoding="utf-8"))


def read_params_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ConfigError(f"params file {path} does not exist; profiles live in params/<profile>.yaml")
    return read_yaml(path)  # UTF-8, no repeated key, valid YAML: else a ConfigError naming file and line


def describe(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"key {where + '.' if where != '(top level)' else ''}{extra[0]} is not allowed; allowed keys: {', '.join(allowed)}"
    if error.validator == "propertyNames":
        allowed = schema.get("propertyNames", {}).get("enum")
        bad = error.message.split(" ")[0]
        if allowed:
            return f"key {where}.{bad.strip(chr(39))} is not allowed; allowed: {', '.join(map(str, allowed))}"
    if error.validator == "enum":
        return f"key {where} = {error.instance!r} is not allowed; allowed values: {', '.join(map(repr, error.validator_value))}"
    if error.validator == "required":
        return f"key {where}: {error.message}"
    return f"key {where} = {error.instance!r}: {error.message}"


def validate(instance: Any, schema: dict, source: Path) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        lines = [f"{source}: {describe(best)}"]
        others = [e for e in errors if e is not best]
        lines += [f"  also: {describe(e)}" for e in others[:4]]
        raise ConfigError("\n".join(lines))
