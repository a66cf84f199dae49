"""MuJoCo's import and its OpenGL renderer, with a rendering backend that cannot work said as an ActlabError.

MuJoCo picks its OpenGL platform from ``MUJOCO_GL`` when it is imported: ``MUJOCO_GL=bogus`` raised
"RuntimeError: invalid value for environment variable MUJOCO_GL" at ``import mujoco``, ``MUJOCO_GL=osmesa``
without libOSMesa an AttributeError inside PyOpenGL there, and ``MUJOCO_GL=glfw`` on a machine without a
display a ``mujoco.FatalError`` ("an OpenGL platform library has not been loaded") at the first render:
each a traceback of `actlab eval`, `sim record` or `demo`. Every import of mujoco in actlab goes through
:func:`mujoco_module` and every renderer through :func:`make_renderer`.
"""

from __future__ import annotations

import os
from typing import Any

from actlab.errors import ActlabError

# The headless backend actlab sets when MUJOCO_GL is unset (EGL: no display needed, GPU or Mesa's llvmpipe).
DEFAULT_GL = "egl"
# MuJoCo's backends on Linux (glfw needs a display; osmesa needs libOSMesa, software only).
GL_BACKENDS = ("egl", "osmesa", "glfw")


def gl_error(e: BaseException, when: str) -> ActlabError:
    """The ActlabError for a failed ``import mujoco`` or OpenGL context (``when``: which of the two)."""
    value = os.environ.get("MUJOCO_GL")
    shown = "unset" if value is None else repr(value)
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return ActlabError(
        f"MuJoCo's OpenGL rendering does not work here ({when} failed with MUJOCO_GL={value})",
        field="MUJOCO_GL (environment variable)",
        expected=f"one of {', '.join(GL_BACKENDS)} that works on this machine (glfw needs a display, "
        "osmesa needs libOSMesa)",
        found=f"MUJOCO_GL {shown}: {type(e).__name__}: {first}",
        fix=f"run with MUJOCO_GL={DEFAULT_GL} (headless, actlab's default: `unset MUJOCO_GL` or "
        f"`export MUJOCO_GL={DEFAULT_GL}`); if EGL fails too, install the EGL/Mesa libraries "
        "(e.g. libegl1 libgl1-mesa-dri) or use MUJOCO_GL=osmesa with libosmesa6",
    )


def mujoco_module() -> Any:
    """``import mujoco`` with actlab's headless default (``MUJOCO_GL=egl`` unless set), a backend that
    cannot load refused as an ActlabError naming MUJOCO_GL."""
    os.environ.setdefault("MUJOCO_GL", DEFAULT_GL)
    try:
        import mujoco
    except (RuntimeError, ImportError, AttributeError, OSError) as e:
        raise gl_error(e, "import mujoco") from e
    return mujoco


def make_renderer(model: Any, height: int, width: int) -> Any:
    """A ``mujoco.Renderer``; an OpenGL context that cannot be made is refused naming MUJOCO_GL."""
    mujoco = mujoco_module()
    try:
        return mujoco.Renderer(model, height, width)
    except (mujoco.FatalError, RuntimeError, ImportError, AttributeError, OSError) as e:
        raise gl_error(e, "creating the OpenGL context") from e


def check_rendering() -> None:
    """Make one small OpenGL context and close it: a backend that cannot render refused as an ActlabError
    here, in the calling process. Done before worker processes are started: a worker whose pool
    initializer failed on it was reported as "a recording worker process died (killed, out of memory,
    or crashed while starting)", with a fix about memory and --workers."""
    mujoco = mujoco_module()
    model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size="1"/></worldbody></mujoco>')
    make_renderer(model, 16, 16).close()
