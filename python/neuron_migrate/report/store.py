"""report.json: written again (atomically) after every section, so an interrupted or crashed
run leaves what it measured so far readable. Versioned: `schema` and `schema_version`."""
import datetime
import json
import os
import traceback as traceback_module

from .. import REPORT_SCHEMA, REPORT_SCHEMA_VERSION, __version__


def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class ReportStore:
    """Owns report.json in `folder`. Not thread-safe: the runner's thread writes it."""

    def __init__(self, folder, header):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, "report.json")
        self.data = {"schema": REPORT_SCHEMA, "schema_version": REPORT_SCHEMA_VERSION, "tool_version": __version__,
                     "status": "running", "started": _now(), "finished": None, **header,
                     "sections": {}, "findings": []}
        self.save()

    def set(self, name, value):
        self.data["sections"][name] = value
        self.save()

    def finding(self, section, message, severity="warning", traceback=None, **extra):
        """A problem the run met or found; `traceback` as text, True for the current exception."""
        if traceback is True:
            traceback = traceback_module.format_exc()
        self.data["findings"].append({"section": section, "severity": severity, "message": message,
                                      "traceback": traceback, **extra})
        self.save()

    def finish(self, status):
        self.data["status"] = status
        self.data["finished"] = _now()
        self.save()

    def save(self):
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(self.data, handle, indent=1, default=_jsonable)
        os.replace(temporary, self.path)


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def load(path):
    """A report dict from a folder or a report.json path; OSError or ValueError naming the file."""
    if os.path.isdir(path):
        path = os.path.join(path, "report.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as error:
        raise OSError(f"{path}: cannot read the report ({error.strerror}); expected a report folder "
                      "written by `neuron-migrate run`, or its report.json") from None
    except ValueError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        raise ValueError(f"{path}: not a neuron-migrate report (schema "
                         f"{data.get('schema') if isinstance(data, dict) else None!r})")
    if data.get("schema_version", 0) > REPORT_SCHEMA_VERSION:
        raise ValueError(f"{path}: report schema version {data['schema_version']} is newer than this tool's "
                         f"({REPORT_SCHEMA_VERSION})")
    if not isinstance(data.get("sections"), dict):
        raise ValueError(f"{path}: a neuron-migrate report without its sections (truncated or edited?)")
    return data
