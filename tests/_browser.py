"""Test helper: screenshots of the HTML reports with a headless Chromium (not part of tabdp).

Chromium is not a Python dependency: on Debian / Ubuntu install the package ``chromium``
(``apt-get install chromium``), or point ``TABDP_CHROMIUM`` at a Chromium / Chrome executable.
The browser runs headless, sandbox-less (containers), with a fresh throw-away profile and with
every background network feature turned off; the reports are self-contained, so it never needs
the network.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tabdp.exceptions import InvalidParameterError, TabdpError

__all__ = ["find_chromium", "screenshot", "dump_dom", "CHROMIUM_NAMES"]

#: Executable names looked up on ``PATH``, in order, when ``TABDP_CHROMIUM`` is not set.
CHROMIUM_NAMES: tuple[str, ...] = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The Chromium executable to use, or ``None`` if there is none.

    ``$TABDP_CHROMIUM`` (a path or a command name) wins when set and non-empty; otherwise the
    first of :data:`CHROMIUM_NAMES` found on ``PATH``.

    Returns:
        An absolute path, or ``None``.

    Example:
        >>> exe = find_chromium()
        >>> exe is None or os.path.isabs(exe)
        True
    """
    env = os.environ.get("TABDP_CHROMIUM", "").strip()
    if env:
        found = shutil.which(env)
        return os.path.abspath(found) if found else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return os.path.abspath(found)
    return None


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidParameterError(f"screenshot: {name} must be a positive integer; got "
                                    f"{value!r}.")
    return value


def screenshot(html_path: str | Path, png_path: str | Path, *, width: int = 1280,
               height: int = 2400, timeout: float = 60.0) -> Path:
    r"""Render an HTML file with headless Chromium and save a PNG of its top ``width × height``.

    The page is loaded from ``file://``; the viewport is ``width × height`` CSS pixels at a
    device scale factor of 1, so the PNG has exactly that size.

    Args:
        html_path: The page to render (must exist).
        png_path: Where to write the PNG (its folder must exist; an existing file is replaced).
        width: Viewport width in pixels.
        height: Viewport height in pixels (the part of the page below is not captured).
        timeout: Seconds before the browser is stopped and an error raised.

    Returns:
        The PNG path, absolute.

    Raises:
        InvalidParameterError: When no Chromium is found, the HTML file does not exist, or a size
            or timeout is not positive.
        TabdpError: When Chromium fails, times out or writes no image (the message ends with
            the tail of its error output).

    Example:
        >>> import tempfile, pathlib
        >>> if find_chromium():
        ...     with tempfile.TemporaryDirectory() as tmp:
        ...         page = pathlib.Path(tmp) / "p.html"
        ...         _ = page.write_text("<h1>hello</h1>")
        ...         png = screenshot(page, pathlib.Path(tmp) / "p.png", width=320, height=200)
        ...         ok = png.read_bytes()[:4] == b"\x89PNG"
        ... else:
        ...     ok = True
        >>> ok
        True
    """
    w = _positive_int("width", width)
    h = _positive_int("height", height)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidParameterError(f"screenshot: timeout must be a number of seconds > 0; got "
                                    f"{timeout!r}.")
    exe = find_chromium()
    env_exe = os.environ.get("TABDP_CHROMIUM", "").strip()
    if exe is None and env_exe:
        raise InvalidParameterError(
            f"screenshot: TABDP_CHROMIUM is set to {env_exe!r}, which is not an executable "
            "file or a command on PATH.\n"
            "Hint: point TABDP_CHROMIUM at a Chromium or Chrome executable, or unset it and "
            "install the Debian package `chromium` (apt-get install chromium).")
    if exe is None:
        raise InvalidParameterError(
            "screenshot: no Chromium found (looked at $TABDP_CHROMIUM, then "
            f"{', '.join(CHROMIUM_NAMES)} on PATH).\n"
            "Hint: install the Debian package `chromium` (apt-get install chromium), or set "
            "TABDP_CHROMIUM to the path of a Chromium or Chrome executable.")
    page = Path(html_path).resolve()
    if not page.is_file():
        raise InvalidParameterError(f"screenshot: HTML file not found: {str(page)!r}.")
    out = Path(png_path).resolve()
    if not out.parent.is_dir():
        raise InvalidParameterError(f"screenshot: folder of png_path does not exist: "
                                    f"{str(out.parent)!r}.")
    if out.exists():
        out.unlink()
    with tempfile.TemporaryDirectory(prefix="tabdp-chromium-") as profile:
        cmd = [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars", "--disable-dev-shm-usage",
            "--force-device-scale-factor=1", f"--user-data-dir={profile}",
            f"--window-size={w},{h}", f"--screenshot={out}", page.as_uri(),
        ]
        code, stdout, stderr = _run_chromium(
            cmd, profile, timeout, f"screenshot: Chromium did not finish within {timeout:g} s "
            f"rendering {str(page)!r}.")
    if code != 0 or not out.is_file() or out.stat().st_size == 0:
        raise TabdpError(
            f"screenshot: Chromium ({exe}) failed to render {str(page)!r} (exit code "
            f"{code}; image written: {out.is_file()}).{_tail(stderr + stdout)}")
    return out


#: Flags that cut Chromium off the network: every host name resolves to nothing and every
#: request that still leaves goes to a proxy on a closed local port. ``file://`` pages load.
OFFLINE_FLAGS: tuple[str, ...] = ("--proxy-server=http://127.0.0.1:9",
                                  "--host-resolver-rules=MAP * ~NOTFOUND")


def dump_dom(html_path: str | Path, *, offline: bool = True, timeout: float = 60.0,
             script_budget_ms: int = 10_000) -> str:
    """The DOM of an HTML file after its scripts ran, as headless Chromium serializes it.

    Args:
        html_path: The page to load (from ``file://``; must exist).
        offline: Cut the browser off the network (:data:`OFFLINE_FLAGS`).
        timeout: Seconds before the browser is stopped and an error raised.
        script_budget_ms: Virtual time the page's scripts get before the DOM is taken.

    Returns:
        The serialized DOM (HTML text).

    Raises:
        InvalidParameterError: When no Chromium is found or the HTML file does not exist.
        TabdpError: When Chromium fails or times out.

    Example:
        >>> import tempfile, pathlib
        >>> if find_chromium():
        ...     with tempfile.TemporaryDirectory() as tmp:
        ...         page = pathlib.Path(tmp) / "p.html"
        ...         _ = page.write_text("<p id=x></p><script>x.textContent = 6 * 7</script>")
        ...         ok = '<p id="x">42</p>' in dump_dom(page)
        ... else:
        ...     ok = True
        >>> ok
        True
    """
    exe = find_chromium()
    if exe is None:
        raise InvalidParameterError(
            "dump_dom: no Chromium found (looked at $TABDP_CHROMIUM, then "
            f"{', '.join(CHROMIUM_NAMES)} on PATH).\n"
            "Hint: install the Debian package `chromium` (apt-get install chromium).")
    page = Path(html_path).resolve()
    if not page.is_file():
        raise InvalidParameterError(f"dump_dom: HTML file not found: {str(page)!r}.")
    with tempfile.TemporaryDirectory(prefix="tabdp-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
               *(OFFLINE_FLAGS if offline else ()),
               f"--virtual-time-budget={int(script_budget_ms)}", "--dump-dom", page.as_uri()]
        code, stdout, stderr = _run_chromium(
            cmd, profile, timeout, f"dump_dom: Chromium did not finish within {timeout:g} s "
            f"loading {str(page)!r}.")
    if code != 0 or not stdout.strip():
        raise TabdpError(f"dump_dom: Chromium ({exe}) failed to load {str(page)!r} (exit code "
                         f"{code}).{_tail(stderr)}")
    return stdout.decode("utf-8", errors="replace")


def _run_chromium(cmd: list[str], profile: str, timeout: float,
                  late: str) -> tuple[int, bytes, bytes]:
    """Run ``cmd`` (a Chromium) to its end: its exit code, stdout and stderr.

    ``HOME`` is ``profile`` unless set. The browser runs in its own process group: on timeout
    (``timeout`` seconds) it and all its helper processes are stopped and a `TabdpError` says
    ``late`` and the last lines of its stderr.
    """
    env = dict(os.environ)
    env.setdefault("HOME", profile)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=float(timeout))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, stderr = proc.communicate()
        raise TabdpError(f"{late}{_tail(stderr)}") from None
    finally:
        if proc.poll() is None:  # pragma: no cover - interrupted
            _kill_group(proc)
            proc.wait()
    return proc.returncode, stdout, stderr


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # pragma: no cover - already gone
        pass


def _tail(raw: bytes, lines: int = 15) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return ""
    tail = "\n".join(text.splitlines()[-lines:])
    return f"\nChromium output (last lines):\n{tail}"
