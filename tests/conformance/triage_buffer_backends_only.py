"""--preload file for triage: keep only the array backends of mpi4py's test helper `arrayimpl`
that export the buffer protocol (array.array and numpy), dropping its __dlpack__ and
__cuda_array_interface__ backends, so that tests looping over array types show the first
failure that is not "this object is not a buffer".

    run_mpi4py_suite.py --patch-get-vendor \
        --preload tests/conformance/triage_buffer_backends_only.py

Runs inside each rank (mpi4py's test folder is on sys.path); touches only the test helper.
"""
import arrayimpl

arrayimpl.ArrayBackends[:] = [b for b in arrayimpl.ArrayBackends
                             if b.__name__ in ("ArrayArray", "ArrayNumPy")]
