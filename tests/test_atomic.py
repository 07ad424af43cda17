"""A full disk during an atomic write is reported as such, naming the output, and leaves no file."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from workflow_scripts import atomic
from workflow_scripts.atomic import NoSpaceError, atomic_path

needs_dev_full = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@needs_dev_full
def test_enospc_names_the_destination_and_removes_the_temp_file(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(NoSpaceError, match=f"no space left on device while writing {target}") as caught:
        with atomic_path(target) as tmp, open("/dev/full", "wb") as full:  # the kernel's own ENOSPC
            tmp.write_bytes(b"partial")
            full.write(b"x" * 4096)
    assert caught.value.errno == errno.ENOSPC
    assert leftovers(tmp_path) == []


def test_other_errors_pass_unchanged(tmp_path):
    with pytest.raises(PermissionError), atomic_path(tmp_path / "out.bin"):
        raise PermissionError(errno.EACCES, "denied")
    assert leftovers(tmp_path) == []


@needs_dev_full
def test_torch_short_write_on_a_full_filesystem(tmp_path, monkeypatch):
    """torch.save to a path turns ENOSPC into 'unexpected pos ...': on a full filesystem, a full disk."""
    torch = pytest.importorskip("torch")
    target = tmp_path / "state.pt"
    with pytest.raises(RuntimeError, match="unexpected pos"), atomic_path(target):
        torch.save({"w": torch.zeros(4096)}, "/dev/full")  # free space is plenty: not taken for ENOSPC
    monkeypatch.setattr(atomic, "_free_bytes", lambda folder: 0)
    with pytest.raises(NoSpaceError, match=f"while writing {target}"), atomic_path(target):
        torch.save({"w": torch.zeros(4096)}, "/dev/full")
    assert leftovers(tmp_path) == []


@needs_dev_full
@pytest.mark.slow
def test_checkpoint_save_keeps_the_errno(tmp_path, monkeypatch):
    """Resume checkpoints are saved through a file object, so ENOSPC arrives as itself."""
    torch = pytest.importorskip("torch")
    from workflow_scripts.modeling import checkpoint

    real_open = Path.open

    def full_temp_file(self: Path, *args, **kwargs):
        return real_open(Path("/dev/full") if self.suffix == ".tmp" else self, *args, **kwargs)

    model = torch.nn.Linear(512, 512)
    optimizer = torch.optim.AdamW(model.parameters())
    monkeypatch.setattr(Path, "open", full_temp_file)
    with pytest.raises(NoSpaceError, match="step_00000003.pt"):
        checkpoint.save(tmp_path / "resume", 3, model, optimizer, [], "k")
    assert leftovers(tmp_path / "resume") == []
