"""User error classes, codes and strings (MPI.Add_error_class/code/string, MPI 4.1's
Remove_*): unique values above ERR_LASTCODE, LASTUSEDCODE growing, strings, removal order."""
import pytest

from minimpi import MPI
from minimpi.errors import UserErrors


def test_classes_and_codes_are_unique_and_lastusedcode_grows():
    before = MPI.COMM_WORLD.Get_attr(MPI.LASTUSEDCODE)
    assert before >= MPI.ERR_LASTCODE
    errclass = MPI.Add_error_class()
    assert errclass > before and MPI.COMM_WORLD.Get_attr(MPI.LASTUSEDCODE) == errclass
    code1, code2 = MPI.Add_error_code(errclass), MPI.Add_error_code(MPI.ERR_OTHER)
    assert len({errclass, code1, code2}) == 3
    assert MPI.COMM_SELF.Get_attr(MPI.LASTUSEDCODE) == max(code1, code2)
    assert MPI.Get_error_class(errclass) == errclass
    assert MPI.Get_error_class(code1) == errclass and MPI.Get_error_class(code2) == MPI.ERR_OTHER
    assert MPI.Get_error_string(code1) == ""
    MPI.Add_error_string(code1, "my error")
    exc = MPI.Exception(code1)
    assert exc.Get_error_code() == code1 == int(exc) and exc.Get_error_class() == errclass
    assert str(exc) == exc.Get_error_string() == "my error" and exc == code1
    for value, call in ((code1, MPI.Remove_error_code), (errclass, MPI.Remove_error_class)):
        with pytest.raises(MPI.Exception):      # a string (class: codes) still attached
            call(value)
    MPI.Remove_error_string(code1)
    MPI.Remove_error_code(code1)
    MPI.Remove_error_code(code2)
    MPI.Remove_error_class(errclass)
    with pytest.raises(MPI.Exception, match="not a user error"):
        MPI.Remove_error_class(errclass)
    assert MPI.Add_error_class() > max(code1, code2)     # removed values are not reused


def test_bad_arguments_are_errors_naming_the_call():
    errors = UserErrors()
    with pytest.raises(MPI.Exception, match="Add_error_code.*not an error class") as info:
        errors.add_code(errors.last_used + 10)
    assert info.value.Get_error_class() == MPI.ERR_ARG
    with pytest.raises(MPI.Exception, match="Add_error_string"):
        errors.add_string(MPI.ERR_OTHER, "predefined codes keep their strings")
    errclass = errors.add_class()
    with pytest.raises(MPI.Exception, match="at most"):
        errors.add_string(errclass, "x" * MPI.MAX_ERROR_STRING)
    with pytest.raises(TypeError):
        errors.add_string(errclass, 42)
    code = errors.add_code(errclass)
    with pytest.raises(MPI.Exception, match="is an error class"):
        errors.remove_code(errclass)
    with pytest.raises(MPI.Exception, match="is an error code"):
        errors.remove_class(code)
    for call in (MPI.Remove_error_class, MPI.Remove_error_code, MPI.Remove_error_string):
        with pytest.raises(MPI.Exception):
            call(0)
