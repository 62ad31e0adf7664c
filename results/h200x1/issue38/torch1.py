import os, sys
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29538")
import torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1)
t = torch.ones(8, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("ready: torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "sum", t[0].item(), flush=True)
sys.stdin.read()   # hold the process group until the script closes stdin
dist.destroy_process_group()
