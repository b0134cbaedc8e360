"""Monitor: incremental, restartable readers of what DAGMan, HTCondor and Pegasus write.

* ``dag`` -- the DAGMan ``.dag`` (nodes, edges, retries, sub-DAGs, splices, rescue DAGs);
* ``submit_file`` -- a node's ``.sub``; ``submit_dir`` -- the ``Workflow`` of a submit dir;
* ``abstract_wf`` -- input sizes from the Pegasus abstract workflow and replica catalogs;
* ``eventlog`` -- the job event log, read incrementally; ``eventparse`` -- one event, parsed
  with the grammar of HTCondor's own reader; ``eventtime`` -- its stamp; ``eventmap`` -- its
  events as ``TaskEvent``s (``EventLogFollower``);
* ``kickstart`` -- pegasus-kickstart records; ``jobstate`` -- jobstate.log; ``braindump``;
  ``yamlio`` -- YAML with a shape check before the C loader;
* ``hosts`` -- execute host / kickstart address -> instance id;
* ``position`` -- read positions that survive restarts; ``problems`` -- one-line warnings;
* ``run_state`` -- the task states the loop keeps, fed by the task events;
* ``submit_monitor`` -- the observations port over one submit dir (``SubmitDirMonitor``)
  and over every workflow under a root (``SubmitRootMonitor``); ``dagman_status`` --
  whether DAGMan has finished; ``inspect`` -- ``wire-daemon inspect``.
"""
