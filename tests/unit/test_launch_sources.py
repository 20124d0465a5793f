"""Starting without `minimpi run`: which environment means which rank, size and coordinator
(Slurm, MINIMPI_COORDINATOR, torchrun, Open MPI, PMI), where the job secret comes from, and
which local address a rank's data plane uses (runtime/sources.py, runtime/netaddr.py)."""
from __future__ import annotations

import os

import pytest

from minimpi.errors import MinimpiError
from minimpi.runtime import netaddr, sources
from minimpi.runtime.bootstrap import bootstrap

SECRET = "correct-horse-battery-staple"

SRUN = {  # what srun -n 4 sets in task 2 (measured on Slurm 22.05)
    "SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "2", "SLURM_NODEID": "0",
    "SLURM_STEP_NODELIST": "node[07-08]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3", "SLURM_STEP_NUM_TASKS": "4",
    "SLURMD_NODENAME": "node07", "SLURM_JOB_NODELIST": "node[07-08]",
}


# ---- which source, which rank/size/coordinator ----------------------------------------------
def test_srun_task_rank_size_and_coordinator_on_the_first_node():
    rdv = sources.find(SRUN)
    assert (rdv.source, rdv.rank, rdv.size, rdv.coord_host) == ("slurm", 2, 4, "node07")
    assert sources.SLURM_PORT_BASE <= rdv.coord_port < \
        sources.SLURM_PORT_BASE + sources.SLURM_PORT_SPAN
    assert rdv.job_id == "slurm-4242.3"
    # every task derives the same port; another step of the job gets another one
    assert sources.find({**SRUN, "SLURM_PROCID": "0"}).coord_port == rdv.coord_port
    assert sources.find({**SRUN, "SLURM_STEP_ID": "4"}).coord_port != rdv.coord_port
    assert "SLURM_JOB_ID=4242" in rdv.origin


def test_srun_reserved_ports_are_used_when_slurm_gives_them():
    rdv = sources.find({**SRUN, "SLURM_STEP_RESV_PORTS": "12000-12003"})
    assert rdv.coord_port == 12000 and "SLURM_STEP_RESV_PORTS" in rdv.origin


def test_rank_0_elsewhere_than_the_first_node_is_refused_with_the_fix():
    with pytest.raises(MinimpiError, match="MINIMPI_COORDINATOR"):
        sources.find({**SRUN, "SLURM_PROCID": "0", "SLURMD_NODENAME": "node08"})


def test_a_batch_script_is_not_a_step():
    # sbatch's script sees SLURM_PROCID=0 and the job's SLURM_NTASKS, but no step id: it is
    # one process, not rank 0 of a world that will never assemble
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "vm", "SLURM_TASKS_PER_NODE": "4"}
    assert sources.find(env) is None
    assert bootstrap(env).size == 1


@pytest.mark.parametrize("rank_var,size_var", [
    ("MINIMPI_RANK", "MINIMPI_SIZE"), ("RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")])
def test_environment_rendezvous_accepts_each_family_of_rank_variables(rank_var, size_var):
    rdv = sources.find({"MINIMPI_COORDINATOR": "head:29400", rank_var: "3", size_var: "5"})
    assert (rdv.source, rdv.rank, rdv.size) == ("env", 3, 5)
    assert (rdv.coord_host, rdv.coord_port) == ("head", 29400)
    assert rank_var in rdv.origin


def test_minimpi_variables_win_over_generic_ones():
    rdv = sources.find({"MINIMPI_COORDINATOR": "h:1234", "MINIMPI_RANK": "1",
                        "MINIMPI_SIZE": "2", "RANK": "5", "WORLD_SIZE": "8"})
    assert (rdv.rank, rdv.size) == (1, 2)


def test_torchrun_style_master_addr_and_port():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2"}
    rdv = sources.find(env)
    assert (rdv.source, rdv.coord_host, rdv.coord_port, rdv.rank) == ("torchrun", "10.0.0.1",
                                                                       29500, 1)
    # under torchrun itself its agent's store holds MASTER_PORT: take the next one
    rdv = sources.find({**env, "TORCHELASTIC_RUN_ID": "abc"})
    assert rdv.coord_port == 29501 and rdv.job_id == "abc"


@pytest.mark.parametrize("env,expected", [
    ({"MINIMPI_COORDINATOR": "nohost"}, "HOST:PORT"),
    ({"MINIMPI_COORDINATOR": "h:99999", "RANK": "0", "WORLD_SIZE": "2"}, "HOST:PORT"),
    ({"MINIMPI_COORDINATOR": "h:80"}, "no rank and size"),
    ({"MINIMPI_COORDINATOR": "h:80", "RANK": "2", "WORLD_SIZE": "2"}, "outside 0..1"),
    ({"MINIMPI_COORDINATOR": "h:80", "RANK": "x", "WORLD_SIZE": "2"}, "not an integer"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}, "Open MPI.*MINIMPI_COORDINATOR"),
    ({"PMI_RANK": "0", "PMI_SIZE": "4"}, "PMI.*MINIMPI_COORDINATOR"),
    ({"MINIMPI_RANK": "0", "MINIMPI_SIZE": "4"}, "MINIMPI_COORD .*MINIMPI_COORDINATOR"),
])
def test_incomplete_environments_are_clear_errors(env, expected):
    with pytest.raises(MinimpiError, match=expected):
        sources.find(env)


def test_plain_processes_and_one_rank_jobs_stay_singletons():
    assert sources.find({"HOME": "/x", "RANK": "0"}) is None          # RANK alone: not ours
    assert sources.find({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}) is None
    info = bootstrap({**SRUN, "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                      "SLURM_STEP_NUM_TASKS": "1"})
    assert (info.size, info.source, info.coordinator, info.secret) == (1, "slurm", None, b"")


def test_minimpi_run_environment_is_left_to_the_launcher_source():
    assert sources.find({"MINIMPI_COORD": "tcp://127.0.0.1:1", **SRUN}) is None


def test_first_node_of_compressed_node_lists():
    assert sources.first_node("vm") == "vm"
    assert sources.first_node("node[07-09,02],gpu1") == "node07"
    assert sources.first_node("r[1-2]n[3-4]") == "r1n3"
    with pytest.raises(MinimpiError, match="first node"):
        sources.first_node("node[")


# ---- the secret ---------------------------------------------------------------------------
def _key(tmp_path, mode=0o600, text=SECRET):
    path = tmp_path / "key"
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return str(path)


def test_secret_from_the_environment_or_a_file(tmp_path):
    assert sources.user_secret({"MINIMPI_SECRET": SECRET}) == (SECRET.encode(), "MINIMPI_SECRET")
    raw, origin = sources.user_secret({"MINIMPI_SECRET_FILE": _key(tmp_path)})
    assert raw == SECRET.encode() and "MINIMPI_SECRET_FILE" in origin


def test_per_user_key_file_in_the_home_directory(tmp_path):
    (tmp_path / ".minimpi").mkdir()
    _key(tmp_path / ".minimpi")
    os.rename(tmp_path / ".minimpi" / "key", tmp_path / ".minimpi" / "secret")
    raw, origin = sources.user_secret({"HOME": str(tmp_path)})
    assert raw == SECRET.encode() and origin == str(tmp_path / ".minimpi" / "secret")


def test_a_key_file_others_can_read_is_refused(tmp_path):
    with pytest.raises(MinimpiError, match="chmod 600"):
        sources.user_secret({"MINIMPI_SECRET_FILE": _key(tmp_path, mode=0o644)})


def test_short_secrets_are_refused():
    with pytest.raises(MinimpiError, match="at least 16"):
        sources.user_secret({"MINIMPI_SECRET": "short"})


def test_no_secret_is_refused_naming_every_way_to_give_one(tmp_path):
    with pytest.raises(MinimpiError) as err:
        sources.user_secret({"HOME": str(tmp_path)})
    text = str(err.value)
    for what in ("MINIMPI_SECRET", "MINIMPI_SECRET_FILE", "minimpi keygen",
                 str(tmp_path / ".minimpi" / "secret"), "MINIMPI_INSECURE=1"):
        assert what in text
    # the explicit opt-out
    assert sources.user_secret({"HOME": str(tmp_path), "MINIMPI_INSECURE": "1"})[0] == b""


def test_job_key_differs_per_job_and_is_shared_within_one():
    env = {"MINIMPI_SECRET": SECRET}
    a = sources.find({**SRUN})
    b = sources.find({**SRUN, "SLURM_PROCID": "0"})
    c = sources.find({**SRUN, "SLURM_STEP_ID": "9"})
    assert sources.job_secret(env, a) == sources.job_secret(env, b)
    assert sources.job_secret(env, a) != sources.job_secret(env, c)
    assert len(sources.job_secret(env, a)) == 32


def test_keygen_writes_a_private_key_the_sources_accept(tmp_path):
    from minimpi.launcher.keygen import write_key
    path = str(tmp_path / "home" / ".minimpi" / "secret")
    write_key(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(sources.user_secret({"HOME": str(tmp_path / "home")})[0]) == 64
    with pytest.raises(FileExistsError):
        write_key(path)


# ---- the data-plane address -------------------------------------------------------------------
def test_route_source_of_loopback_is_loopback():
    assert netaddr.route_source("127.0.0.1") == "127.0.0.1"


def test_interfaces_by_name_network_or_address():
    addrs = netaddr.interface_addresses()
    assert ("lo", "127.0.0.1") in addrs
    assert netaddr.iface_address("lo") == "127.0.0.1"
    assert netaddr.iface_address("127.0.0.0/8") == "127.0.0.1"
    assert netaddr.iface_address("127.0.0.1") == "127.0.0.1"
    with pytest.raises(netaddr.AddressError, match="lo=127.0.0.1"):
        netaddr.iface_address("nosuchif0")
    with pytest.raises(netaddr.AddressError, match="no address of this host"):
        netaddr.iface_address("198.51.100.0/24")
    with pytest.raises(netaddr.AddressError, match="cannot resolve"):
        netaddr.route_source("no-such-host.invalid")


def test_data_plane_address_precedence():
    assert netaddr.data_plane_address("127.0.0.1", iface="lo", bind="10.9.9.9") == "10.9.9.9"
    assert netaddr.data_plane_address("no-such-host.invalid", iface="lo") == "127.0.0.1"
    assert netaddr.data_plane_address("127.0.0.1") == "127.0.0.1"
    rdv = sources.Rendezvous("env", 1, 2, "no-such-host.invalid", 5, "j", "test")
    with pytest.raises(MinimpiError, match="MINIMPI_IFACE"):
        sources.data_plane_address({}, rdv)
