"""tools/pdl_audit.py: the counts of global loads before a kernel's first griddepcontrol.wait in
PTX and SASS text (shaped as nvcc -ptx and cuobjdump -sass print them), and its clear error when the
toolkit's binaries are missing. The compile-and-disassemble run itself needs cuobjdump (GPU machine)."""
import subprocess
import sys
from pathlib import Path

from tool_util import load_tool

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "pdl_audit.py"

PTX = """
.visible .entry _Z4moesPKi(
	.param .u64 _Z4moesPKi_param_0
)
{
	ld.param.u64 	%rd1, [_Z4moesPKi_param_0];
	@%p1 ld.global.nc.v4.u32 	{%r1,%r2,%r3,%r4}, [%rd2];
	ld.shared.u32 	%r5, [%r6];
	griddepcontrol.wait;
	ld.global.nc.u32 	%r7, [%rd3];
	griddepcontrol.wait;
}
	// .globl	_Z5plainPf
.visible .entry _Z5plainPf(
	.param .u64 _Z5plainPf_param_0
)
{
	ld.global.f32 	%f1, [%rd1];
}
"""

SASS = """
	code for sm_90
		Function : _Z4moesPKi
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @P1 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.CONSTANT R13, desc[UR4][R8.64] ;
        /*0030*/                   LDS R5, [R6] ;
        /*0040*/                   ACQBULK ;
        /*0050*/                   EXIT ;
		Function : _Z5plainPf
        /*0000*/                   LDG.E R3, desc[UR4][R2.64] ;
        /*0010*/                   EXIT ;
"""


def load():
    return load_tool("pdl_audit")


def test_counts_loads_before_the_first_wait_only():
    a = load()
    # parameter and shared loads are not global loads; the kernel without a wait is not listed
    assert a.ptx_counts(PTX) == {"_Z4moesPKi": 1}
    assert a.sass_counts(SASS) == {"_Z4moesPKi": 2}


def test_a_load_moved_above_the_wait_shows_as_more_in_the_sass():
    a = load()
    p, s = a.ptx_counts(PTX), a.sass_counts(SASS)
    moved = [k for k in p if s.get(k, 0) > p[k]]
    assert moved == ["_Z4moesPKi"]
    # the same kernel with the id load behind the wait, as the fixed build has it
    fixed = SASS.replace("LDG.E.CONSTANT R13, desc[UR4][R8.64] ;\n        /*0030*/                   LDS R5, [R6] ;\n        /*0040*/                   ACQBULK ;",
                         "LDS R5, [R6] ;\n        /*0040*/                   ACQBULK ;\n        /*0048*/                   LDG.E R13, desc[UR4][R8.64] ;")
    assert a.sass_counts(fixed) == {"_Z4moesPKi": 1}


def test_missing_toolkit_binaries_are_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, str(TOOL), "--nvcc", str(tmp_path / "no-nvcc"), "--cuobjdump", str(tmp_path / "no-cuobjdump"),
                        str(ROOT / "src/backend/cuda/cuda_info.cu")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "no-nvcc and " in r.stderr and "no-cuobjdump not found" in r.stderr and "Traceback" not in r.stderr
