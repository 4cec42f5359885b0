"""`neuron-migrate run`: every question on one workload, section by section. A section that
raises becomes a finding (with its traceback) and the run goes on; report.json is rewritten
after each section; Ctrl-C or SIGTERM stops the run with status "interrupted" and the
report of what was measured so far."""
import json
import os
import signal
import time

import psutil
import torch

from . import (census, compiles, cost, cuda_scan, devices, licence, loading, lock, predict, quality, roofline,
               speed, stopping, training, verdict)
from . import fit as fit_module
from .report.store import ReportStore
from .workload import WorkloadError, digest, load


class _Run:
    """State shared by the sections of one run."""

    def __init__(self, workload, target, baseline, store, sampler, predict_tp=None):
        self.workload, self.target, self.baseline = workload, target, baseline
        self.predict_tp = predict_tp
        self.store, self.sampler = store, sampler
        self.cpu_model = self.target_model = self.baseline_model = None
        self.requests = None
        self.copies = {}

    # -- sections ---------------------------------------------------------------------
    def lock(self):
        w = self.workload
        folder = w.resolve(w.model.path) if w.model.path else None
        factory = w.resolve(w.model.factory.rsplit(":", 1)[0]) if w.model.factory else None
        record = lock.record(w, folder, factory)
        record["devices"] = {"target": devices.device_name(self.target), "baseline": devices.device_name(self.baseline)}
        record["target_simulated"] = devices.is_simulated(self.target)
        return record

    def licence(self):
        w = self.workload
        folder = w.resolve(w.model.path) if w.model.path else None
        config = None
        if folder and os.path.isfile(os.path.join(folder, "config.json")):
            with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
                config = type("Config", (), json.load(handle))
        dataset = w.licence.dataset
        if dataset and os.path.exists(w.resolve(dataset)):
            dataset = w.resolve(dataset)
        return licence.check(folder, config, dataset, w.licence.allowed)

    def cuda_scan(self):
        paths = [self.workload.resolve(p) for p in self.workload.scripts]
        findings = cuda_scan.scan_files(paths)
        return {"scripts": paths, "findings": findings}

    def _config_path(self):
        path = self.workload.model.path
        return self.workload.resolve(path) if path else None

    def fit(self):
        if not self._config_path():
            return {"skipped": "a factory model has no transformers config to build on the meta device"}
        f = self.workload.fit
        return fit_module.fit(self._config_path(), dtype=self.workload.model.dtype, platforms=f.platforms, lnc=f.lnc,
                              tp=f.tp, batch_per_core=f.batch_per_core,
                              max_seq_len=f.max_seq_len or self.workload.inputs.max_seq_len, headroom=f.headroom)

    def roofline(self):
        if not self._config_path():
            return {"skipped": "a factory model has no transformers config to build on the meta device"}
        inputs = self.workload.inputs
        longest = max(list(inputs.prompt_lengths) + [8])
        context = longest + inputs.max_new_tokens
        batches = sorted({1, 8, 32, *inputs.batch_sizes})
        return roofline.bound(self._config_path(), self.workload.model.dtype, context, batches)

    def prediction(self):
        """The dry run's table (predict.py) at the TP degrees asked for, with the team's prices."""
        if not (self.predict_tp or self.workload.predict.tp):
            return {"skipped": "no TP degrees asked for ([predict] tp in the workload, or run --predict-tp)"}
        if not self._config_path():
            return {"skipped": "a factory model has no config.json for the dry run"}
        if self.workload.task == "train":  # a training step of the workload's batch (Note [A training step, dry])
            w, train = self.workload, self.workload.train
            budget = (w.cost.training_run_steps * w.predict.dp * train.batch_size * train.seq_len
                      if w.cost.training_run_steps else None)
            result = predict.predict_training(predict.config_folder(self._config_path()), w.predict.platforms,
                                              self.predict_tp or w.predict.tp, w.predict.lnc, w.predict.dp,
                                              seq_len=train.seq_len, local_batch=train.batch_size, token_budget=budget,
                                              prices=w.cost.price_per_hour, currency=w.cost.currency)
            for refused in result["refused"]:
                self.store.finding("prediction", f"{refused['platform']} TP {refused['tp']}: {refused['error']}")
            return result
        # the workload's concurrency levels served as a stack serves them (continuous batching):
        # concurrent requests share decode steps, not one after the other as on the live clock
        concurrency = list(self.workload.serve.concurrency) if self.workload.task == "generate" else None
        mode = self.workload.predict.mode
        result = predict.for_workload(self.workload, tps=self.predict_tp,
                                      concurrency=concurrency if mode == "compiled" else None)
        for refused in result["refused"]:
            self.store.finding("prediction", f"{refused['platform']} TP {refused['tp']}: {refused['error']}")
        return result

    def load(self):
        start = time.perf_counter()
        self.cpu_model = loading.build_cpu_model(self.workload)
        self.requests = loading.requests(self.cpu_model, self.workload)
        self.baseline_model = loading.copy_to(self.cpu_model, self.baseline)
        self.target_model = loading.copy_to(self.cpu_model, self.target)
        path = os.path.join(self.store.folder, "inputs.json")
        sample = {r.label: r.input_ids.tolist() for r in self.requests}
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(sample, handle)
        parameters = sum(p.numel() for p in self.cpu_model.model.parameters())
        return {"seconds": time.perf_counter() - start, "parameters": parameters,
                "model_class": type(self.cpu_model.model).__name__, "dtype": self.workload.model.dtype,
                "requests": [{"label": r.label, "shape": list(r.shape)} for r in self.requests],
                "inputs_file": "inputs.json", "inputs_sha256": lock.sha256_file(path)}

    def census_and_quality(self):
        """One pass per device under the op census: forward + greedy generation (or two
        training steps); quality compares the two passes."""
        tracking = devices.OpTracking(self.target)
        results = {}
        for role, device, model in (("baseline", self.baseline, self.baseline_model),
                                    ("target", self.target, self.target_model)):
            mode = census.OpCensus(check_64bit=(role == "baseline"))
            if self.workload.task == "train":  # copied before the census, as a generation model is
                model = training.fresh(self.cpu_model, device)
            if role == "target":
                tracking.clear()
            if self.workload.task == "train":  # made on the host before the census: not the device's work
                batches = loading.training_batches(self.cpu_model, self.workload)[:2]
            with mode:
                if self.workload.task == "generate":
                    results[role] = quality.outputs(model, device, self.requests, self.workload.inputs.max_new_tokens)
                else:
                    results[role] = training.run(self.cpu_model, device, batches, self.workload.train.lr,
                                                 self.workload.seed, loaded=model)
            results[role + "_census"] = mode.summary()
        target_census = results["target_census"]
        predicted = census.predicted_fallbacks(target_census, torch.device(self.target).type)
        predicted_names = [entry["op"] for entry in predicted]
        # Note [Predicted fallbacks]: measured where TorchNeuron tracks them, predicted elsewhere
        fallback = tracking.fallback_ops() if tracking.enabled else predicted_names
        self.copies = target_census["copies_bytes"]
        census_section = {
            "device": self.target, "ops": target_census["ops"], "op_calls": target_census["op_calls"],
            "distinct_ops": len(target_census["ops"]), "fallback_ops": fallback,
            "fallback_source": "measured" if tracking.enabled else "predicted",
            "fallback_source_note": "torch_neuronx.get_fallback_ops() on the device" if tracking.enabled else
            f"predicted from the op census on {self.target} and TorchNeuron 2.13's op table (not measured: "
            "TorchNeuron is not the device here)",
            "fallback_ops_predicted": predicted_names, "fallback_prediction": predicted,
            # what a run on the baseline's device (a GPU box, the CPU) predicts: checked against the measured set
            "fallback_ops_predicted_on_baseline": [entry["op"] for entry in
                                                   census.predicted_fallbacks(results["baseline_census"],
                                                                                torch.device(self.baseline).type)],
            "fallback_prediction_agrees": census.same_ops(predicted_names, fallback) if tracking.enabled else None,
            "fallback_detail": census.fallback_report(target_census, fallback),
            "executed_ops": tracking.executed_ops(), "fallback_tracking": tracking.enabled,
            "wide_values": results["baseline_census"]["wide_values"],
            "wide_values_checked_on": self.baseline, "copies_bytes": target_census["copies_bytes"],
            "copies_count": target_census["copies_count"],
            "covers": "forward + greedy generation of every request" if self.workload.task == "generate"
            else "two training steps (forward, backward, AdamW)"}
        self.store.set("census", census_section)
        if self.workload.task == "generate":
            compared = quality.compare(results["target"], results["baseline"])
            for error in compared["errors"]:
                self.store.finding("quality", f"request {error['label']} raised: "
                                   f"{error['target_error'] or error['baseline_error']}",
                                   severity="error", traceback=error["traceback"])
            return compared
        return {"note": "training quality is in the training section (loss curves over all steps)"}

    def compiles(self):
        if not self.workload.compile.enabled:
            return {"skipped": "compile.enabled = false in the workload"}
        kind = torch.device(self.target).type  # the workload's backend for this device ([compile] backend)
        if self.workload.task == "train":
            model = training.fresh(self.cpu_model, self.target)
            batch = loading.training_batches(self.cpu_model, self.workload)[0]
            shapes = [loading.Request(batch, f"b{batch.shape[0]}xL{batch.shape[1]}")]
            result = compiles.measure(model, self.target, shapes, self.workload.compile.backend_for(kind),
                                      training=True, mode=self.workload.compile.mode_for(kind))
        else:
            result = compiles.measure(self.target_model, self.target, self.requests,
                                      self.workload.compile.backend_for(kind), mode=self.workload.compile.mode_for(kind))
        if result.get("finding"):
            self.store.finding("compiles", result["finding"])
        for error in result.get("errors", [])[:3]:
            self.store.finding("compiles", f"compiled forward of {error['request']} raised: {error['error']}",
                               severity="error", traceback=error["traceback"])
        return result

    def speed(self):
        if self.workload.task != "generate":
            return {"skipped": "training workload: time per step is in the training section"}
        result = {}
        for role, device, model in (("target", self.target, self.target_model),
                                    ("baseline", self.baseline, self.baseline_model)):
            self.sampler.phase = f"speed ({role})"
            if self.workload.serve.engine == "vllm":  # Note [Serving engines] in vllm_serve.py
                from . import vllm_serve
                result[role] = vllm_serve.serve(self.workload, device, self.requests)
                continue
            result[role] = speed.serve(model, device, self.requests, self.workload.serve,
                                       self.workload.inputs.max_new_tokens)
            for level in result[role]["levels"]:
                for error in level["errors"]:
                    self.store.finding("speed", f"{role} request {error['label']} failed: {error['error']}",
                                       severity="error", traceback=error.get("traceback"))
        return result

    def training(self):
        if self.workload.task != "train":
            return {"skipped": "generation workload"}
        t = self.workload.train
        batches = loading.training_batches(self.cpu_model, self.workload)
        self.sampler.phase = "training (target)"
        target = training.run(self.cpu_model, self.target, batches, t.lr, self.workload.seed)
        self.sampler.phase = "training (baseline)"
        baseline = training.run(self.cpu_model, self.baseline, batches, t.lr, self.workload.seed)
        for role, record in (("target", target), ("baseline", baseline)):
            if record.get("error"):
                self.store.finding("training", f"{role} training raised: {record['error']}", severity="error",
                                   traceback=record["traceback"])
        restart = None
        if target.get("error"):
            self.store.finding("training", "restart check skipped: the target's training raised")
        else:
            self.sampler.phase = "training restart (target)"
            try:
                restart = training.kill_and_resume(self.workload, self.target)
            except stopping.StopRequested:
                raise
            except Exception as error:  # a finding; the loss curves measured above are kept
                self.store.finding("training", f"restart check failed: {type(error).__name__}: {error}",
                                   severity="error", traceback=True)
        result = training.summary(target, baseline, restart, t.checkpoint_at, t.loss_target)
        baseline_seconds = baseline["step_seconds"][1:]
        if baseline_seconds:
            result["baseline_time_per_step_s"] = sorted(baseline_seconds)[len(baseline_seconds) // 2]
        result["timing"] = devices.timing_note(self.target)
        return result

    def memory(self, process_start_cpu):
        times = psutil.Process().cpu_times()
        cache_bytes, cache_files = compiles.disk_usage(compiles.cache_dir())
        import resource
        return {"target_peak_per_core": devices.peak_per_core(self.target),
                "baseline_peak_per_core": devices.peak_per_core(self.baseline),
                "host_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "host_cpu_seconds": times.user + times.system - process_start_cpu,
                "compile_cache_dir": compiles.cache_dir(), "compile_cache_bytes": cache_bytes,
                "compile_cache_files": cache_files,
                "host_device_bytes": self.copies,
                "between_ranks_bytes": None, "between_ranks_note": "single process: no collectives",
                "device_limits": devices.limits(),
                "timeline": list(self.sampler.samples)}


def run_command(workload_path, target, baseline, out, progress, console, predict_tp=None):
    try:
        workload = load(workload_path)
    except WorkloadError as error:
        console.print(f"[red]workload error:[/red] {error}")
        return 2
    devices.reset_limits()
    for device in (target, baseline):
        try:
            devices.check(device)
        except devices.DeviceUnavailable as error:
            console.print(f"[red]device error:[/red] {error}")
            return 2
    if workload.task == "generate" and workload.serve.engine == "vllm":
        from . import vllm_serve
        try:
            vllm_serve.check(workload)
        except vllm_serve.EngineError as error:
            console.print(f"[red]serving engine error:[/red] {error}")
            return 2
    folder = out or os.path.join("neuron-migrate-report", workload.name)
    try:
        from transformers.utils import logging as transformers_logging
        transformers_logging.disable_progress_bar()
    except ImportError:
        pass
    header = {"workload": workload.name, "task": workload.task, "target": target, "baseline": baseline,
              "conditions": workload.conditions(), "conditions_digest": digest(workload.conditions()),
              "target_simulated": devices.is_simulated(target)}
    store = ReportStore(folder, header)
    from .sampler import MemorySampler
    sampler = MemorySampler(target).start()
    for device in (target, baseline):
        devices.reset_peak(device)
    times = psutil.Process().cpu_times()
    run = _Run(workload, target, baseline, store, sampler, predict_tp)
    sections = [("lock", run.lock, False), ("licence", run.licence, False), ("cuda_scan", run.cuda_scan, False),
                ("fit", run.fit, False), ("roofline", run.roofline, False), ("prediction", run.prediction, False),
                ("load", run.load, False),
                ("quality", run.census_and_quality, True), ("compiles", run.compiles, True),
                ("speed", run.speed, True), ("training", run.training, True)]
    stopping.reset()
    previous = {s: signal.signal(s, stopping.handle_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = "complete"
    try:
        with _progress(console, progress, len(sections)) as bar:
            for name, function, needs_model in sections:
                stopping.check()
                bar.update(f"{name}")
                sampler.phase = name
                if needs_model and run.cpu_model is None:
                    store.set(name, {"skipped": "the model did not load (see findings)"})
                    continue
                try:
                    store.set(name, function())
                except (KeyboardInterrupt, stopping.StopRequested):
                    raise
                except Exception as error:
                    if stopping.requested():  # the stop, surfacing through library code
                        raise stopping.StopRequested(str(error)) from error
                    store.finding(name, f"{type(error).__name__}: {error}", severity="error", traceback=True)
                    store.set(name, {"error": f"{type(error).__name__}: {error}"})
                bar.advance()
    except (KeyboardInterrupt, stopping.StopRequested):
        status = "interrupted"
        store.finding("run", f"interrupted during {sampler.phase}: the sections before it were measured, "
                             "the rest were not")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sampler.stop()
        _finish(store, run, workload, target, baseline, times.user + times.system, status)
    from .report import render_folder
    from .report.terminal import summary
    paths = render_folder(folder)
    console.print(summary(store.data))
    console.print(f"report: {', '.join(paths)}")
    if status == "interrupted":
        return 130
    # "not measured" is never a go: a gate the run could not measure fails it like a no-go
    return 3 if any(v["verdict"] != "go" for v in store.data["sections"].get("verdict", [])) else 0


def _finish(store, run, workload, target, baseline, cpu_start, status):
    """Sections computed from the others; written whatever happened before."""
    for name, function in (("memory", lambda: run.memory(cpu_start)),
                           ("cost", lambda: _cost(store, workload, target, baseline)),
                           ("verdict", lambda: verdict.decide(workload.gates, store.data))):
        try:
            store.set(name, function())
        except Exception as error:
            store.finding(name, f"{type(error).__name__}: {error}", severity="error", traceback=True)
    store.finish(status)


def _cost(store, workload, target, baseline):
    sections = store.data["sections"]
    speed_section = sections.get("speed") if "skipped" not in (sections.get("speed") or {}) else None
    training_section = sections.get("training") or {}
    per_role = {"target": {"time_per_step_s": training_section.get("time_per_step_s")},
                "baseline": {"time_per_step_s": training_section.get("baseline_time_per_step_s")}}
    kinds = {"target": torch.device(target).type, "baseline": torch.device(baseline).type}
    return cost.estimate(workload, kinds, speed_section, per_role, sections.get("compiles"),
                         store.data.get("target_simulated"))


class _progress:
    """A rich progress bar over the sections (a no-op when disabled)."""

    def __init__(self, console, enabled, total):
        self.console, self.enabled, self.total = console, enabled, total

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            self.progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     console=self.console, transient=True)
            self.progress.__enter__()
            self.task = self.progress.add_task("starting", total=self.total)
        return self

    def update(self, description):
        if self.enabled:
            self.progress.update(self.task, description=description)

    def advance(self):
        if self.enabled:
            self.progress.advance(self.task)

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.__exit__(*exc)
        return False
