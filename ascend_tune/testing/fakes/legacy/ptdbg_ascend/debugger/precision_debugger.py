"""``PrecisionDebugger`` of ptdbg_ascend v4.x with the real signatures and step logic, recording its calls."""

from __future__ import annotations

import os

from .debugger_config import DebuggerConfig

CALLS: list = []


class _DumpUtil:
    """The real package keeps its state in module globals (``ptdbg_ascend.dump.dump.DumpUtil``)."""

    iter_num = 0
    target_iter: list = []
    target_rank = None
    dump_switch = "OFF"
    dump_switch_mode = "all"


def reset() -> None:
    """Forget the singleton and the recorded calls (the real package has no such thing; tests need it)."""
    PrecisionDebugger._instance = None
    _DumpUtil.iter_num = 0
    _DumpUtil.target_iter = []
    _DumpUtil.target_rank = None
    _DumpUtil.dump_switch = "OFF"
    _DumpUtil.dump_switch_mode = "all"
    CALLS.clear()


class PrecisionDebugger:
    _instance = None

    def __new__(cls, *args, **kwargs):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance.first_start = True
            cls._instance.config = None
            cls._instance.model = None
            cls._instance.enable_dataloader = False
        return cls._instance

    def __init__(self, dump_path=None, hook_name=None, rank=None, step=None, enable_dataloader=False, model=None):
        if not hasattr(self, "initialized"):
            self.initialized = True
            if hook_name is None:
                raise Exception("You must provide hook_name argument to PrecisionDebugger when config is not provided.")
            self.config = DebuggerConfig(dump_path, hook_name, rank, step)
            self.configure_hook = self.get_configure_hook(self.config.hook_name)
            self.configure_hook()
            _DumpUtil.target_iter = self.config.step
            _DumpUtil.target_rank = self.config.rank
            self.model = model
            if not isinstance(enable_dataloader, bool):
                raise ValueError("Params enable_dataloader only support True or False.")
            self.enable_dataloader = enable_dataloader
            CALLS.append(("init", dict(dump_path=dump_path, hook_name=hook_name, rank=rank, step=step,
                                       enable_dataloader=enable_dataloader, model=model)))

    def get_configure_hook(self, hook_name):
        hook_dict = {"dump": self.configure_full_dump, "overflow_check": self.configure_overflow_dump}
        return hook_dict.get(hook_name)

    def configure_full_dump(self, mode="api_stack", scope=None, api_list=None, filter_switch="OFF",
                            input_output_mode=["all"],  # noqa: B006  (the real default, kept as it is)
                            acl_config=None, backward_input=None, summary_only=False, summary_mode=None):
        if summary_only and summary_mode is not None:
            raise ValueError("summary_mode can not be used with summary_only")
        _DumpUtil.dump_switch_mode = mode
        CALLS.append(("configure_hook", dict(mode=mode, scope=scope if scope is not None else [],
                                             api_list=api_list if api_list is not None else [],
                                             input_output_mode=input_output_mode, summary_only=summary_only)))

    def configure_overflow_dump(self, mode="api", acl_config=None, overflow_nums=1, filter_switch="OFF",
                                need_replicate=False):
        _DumpUtil.dump_switch_mode = mode
        CALLS.append(("configure_hook", dict(mode=mode, overflow_nums=overflow_nums)))

    @classmethod
    def start(cls):
        instance = cls._instance
        if not instance:
            raise Exception("No instance of PrecisionDebugger found.")
        if instance.enable_dataloader:
            return
        if _DumpUtil.iter_num in _DumpUtil.target_iter or not _DumpUtil.target_iter:
            instance.first_start = False
            _DumpUtil.dump_switch = "ON"
            CALLS.append(("start", _DumpUtil.iter_num))
        elif _DumpUtil.target_iter and _DumpUtil.iter_num > max(_DumpUtil.target_iter):
            cls.stop()
            raise Exception(f"ptdbg: exit after iteration {max(_DumpUtil.target_iter)}")
        else:
            cls.stop()

    @classmethod
    def stop(cls):
        instance = cls._instance
        if not instance:
            raise Exception("PrecisionDebugger instance is not created.")
        if instance.enable_dataloader:
            return
        if _DumpUtil.dump_switch == "ON":
            folder = os.path.join(instance.config.dump_path, f"step{_DumpUtil.iter_num}", "ptdbg_dump_v4.0",
                                  f"rank{_DumpUtil.target_rank or 0}")
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, f"{_DumpUtil.dump_switch_mode}_dump.pkl"), "a").close()
        _DumpUtil.dump_switch = "OFF"
        CALLS.append(("stop", _DumpUtil.iter_num))

    @classmethod
    def step(cls):
        instance = cls._instance
        if not instance:
            raise Exception("PrecisionDebugger instance is not created.")
        if not instance.enable_dataloader:
            _DumpUtil.iter_num += 1
            CALLS.append(("step", _DumpUtil.iter_num))
