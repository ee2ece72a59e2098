"""The GPU checks' filters: preflight's compute capability check and the
distribution driver's checks in roles/nvidia_driver. The logic is in
plugins/module_utils/gpu_capability.py and nvidia_driver_state.py."""

from ansible.errors import AnsibleFilterError

from ansible_collections.cntk.cluster.plugins.module_utils import gpu_capability, nvidia_driver_state


def _stdout(result):
    """A registered command's stdout, or None when it did not run or failed (that way of reading is unavailable)."""
    if not isinstance(result, dict) or result.get("skipped") or result.get("rc", 1) != 0:
        return None
    return result.get("stdout", "")


def gpu_reading(nvidia_smi, lspci=None, sysfs=None):
    """{source, gpus} from the registered results of nvidia-smi, lspci and the sysfs grep (best first)."""
    return gpu_capability.read_gpus(_stdout(nvidia_smi), _stdout(lspci), _stdout(sysfs))


def gpu_capability_report(reading, minimum, maximum, accepted, host, what):
    try:
        return gpu_capability.report(reading, minimum, maximum, accepted, host, what)
    except ValueError as error:
        raise AnsibleFilterError(str(error))


def nvidia_distribution_driver(policy_text, host, package, minimum, what, components, required, sources_fix):
    return nvidia_driver_state.distribution_driver(host, package, policy_text, minimum, what, components, required,
                                                   sources_fix)


def nvidia_module_verdict(result, dmesg, module, kernel):
    """modprobe's registered result and dmesg's text -> {state, message}."""
    return nvidia_driver_state.module_verdict(result.get("rc", 1), result.get("stderr", ""), dmesg, module, kernel)


class FilterModule:
    def filters(self):
        return {
            "gpu_reading": gpu_reading,
            "gpu_capability_report": gpu_capability_report,
            "nvidia_distribution_driver": nvidia_distribution_driver,
            "nvidia_module_verdict": nvidia_module_verdict,
        }
