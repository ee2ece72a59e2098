"""The train step's Slurm job (plugins/module_utils/slurm_job.py)."""

from ansible_collections.cntk.cluster.plugins.module_utils import slurm_job


def train_job_sbatch_options(layout, name, run_id, run_dir, timeout, output, retries=0):
    return slurm_job.sbatch_options(list(layout), name, run_id, run_dir, timeout, output, retries=int(retries))


def train_job_uniform_slots(layout):
    return slurm_job.uniform_slots(list(layout))


def train_job_requeue_mapping(ranks):
    return slurm_job.requeue_mapping(int(ranks))


def train_job_slurm_queue(text):
    return slurm_job.queue_lines(text)


def train_job_slurm_busy(text, user, name):
    return slurm_job.busy_jobs(text, str(user), str(name))


def cluster_slurm_queued(text):
    return slurm_job.queued_jobs(str(text))


class FilterModule:
    def filters(self):
        return {"train_job_sbatch_options": train_job_sbatch_options,
                "train_job_uniform_slots": train_job_uniform_slots, "train_job_slurm_queue": train_job_slurm_queue,
                "train_job_requeue_mapping": train_job_requeue_mapping, "train_job_slurm_busy": train_job_slurm_busy,
                "cluster_slurm_queued": cluster_slurm_queued}
