"""The task registry: task name -> Task class. Adding a task = one module + one line here."""
from tasks.con import ConTask
from tasks.dep import DepTask
from tasks.ner import NerTask
from tasks.pos import PosTask
from tasks.srl import SrlTask

TASKS = {
    PosTask.name: PosTask,
    NerTask.name: NerTask,
    DepTask.name: DepTask,
    ConTask.name: ConTask,
    SrlTask.name: SrlTask,
}
