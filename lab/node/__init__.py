"""What runs inside a node (a netns host, a container, a pod, a Ray machine), not in the controller.

`launch` wraps torchrun with the lab's settings, `preload` is its worker server,
`worker_record` names the agent's workers, `nodeproc` is the shim around a node's agent,
`k8s_pod` renders a pod's command, `duty_cycle` slows a worker. None of them imports
the controller's code (cli, exercises, runtimes).
"""
