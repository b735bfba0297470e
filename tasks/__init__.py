"""The task registry: task name -> Task class. Adding a task = one module + one line here."""
from tasks.ner import NerTask
from tasks.pos import PosTask

TASKS = {
    PosTask.name: PosTask,
    NerTask.name: NerTask,
}
