# A second OPC UA server twinops did not write: asyncua (Python, pinned in .ci/run), the
# stack many gateways and edge boxes are built on. Its alarm is reported as Kepware,
# Ignition and asyncua itself report limit alarms: the equipment object (Pump01) is the
# SourceNode, and the watched variable only the InputNode. How the station's equipment
# acts on each other is in references, as an address space models it: Part 23's
# Controls (the RTU controls the pump), and reference types of the site's own: the wet
# well FlowsTo the pump, the pump is PoweredBy its MCC (the other way round), and the
# RTU IsPhysicallyConnectedTo the MCC (no direction: not a connection twinops takes).
#
#   python3 asyncua_server.py PORT
#
# Prints `ready URL` when listening; then reads commands on stdin, one per line, and
# answers `ok ...`:
#   set VALUE     Pump01's DischargePressure (bar) takes a value
#   raise         the HighPressure condition becomes active (unacknowledged)
#   clear         it returns to normal
#   quit
import asyncio
import sys

from asyncua import Server, ua

NS = "urn:twinops-test:asyncua"


async def main(port: int) -> None:
    server = Server()
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:{port}/")
    server.set_server_name("Lift station 3 gateway (asyncua)")
    server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    idx = await server.register_namespace(NS)

    station = await server.nodes.objects.add_object(ua.NodeId("LS3", idx), ua.QualifiedName("LS3", idx))
    pump = await station.add_object(ua.NodeId("LS3.Pump01", idx), ua.QualifiedName("Pump01", idx))
    pressure = await pump.add_variable(
        ua.NodeId("LS3.Pump01.DischargePressure", idx),
        ua.QualifiedName("DischargePressure", idx),
        ua.Variant(4.2, ua.VariantType.Double),
    )
    wet_well = await station.add_object(ua.NodeId("LS3.WetWell", idx), ua.QualifiedName("WetWell", idx))
    mcc = await station.add_object(ua.NodeId("LS3.MCC1", idx), ua.QualifiedName("MCC1", idx))
    rtu = await station.add_object(ua.NodeId("LS3.RTU1", idx), ua.QualifiedName("RTU1", idx))
    references = server.get_node(ua.ObjectIds.NonHierarchicalReferences)
    flows_to = await references.add_reference_type(
        ua.NodeId("FlowsTo", idx), ua.QualifiedName("FlowsTo", idx), symmetric=False, inversename="FlowsFrom"
    )
    powered_by = await references.add_reference_type(
        ua.NodeId("PoweredBy", idx), ua.QualifiedName("PoweredBy", idx), symmetric=False, inversename="Powers"
    )
    await wet_well.add_reference(pump.nodeid, flows_to.nodeid, forward=True, bidirectional=True)
    await pump.add_reference(mcc.nodeid, powered_by.nodeid, forward=True, bidirectional=True)
    await rtu.add_reference(pump.nodeid, ua.NodeId(ua.ObjectIds.Controls), forward=True, bidirectional=True)
    await rtu.add_reference(
        mcc.nodeid, ua.NodeId(ua.ObjectIds.IsPhysicallyConnectedTo), forward=True, bidirectional=True
    )
    # The condition's own node, as servers model it (its type says it is an alarm).
    condition = await pump.add_object(
        ua.NodeId("LS3.Pump01.HighPressure", idx),
        ua.QualifiedName("HighPressure", idx),
        objecttype=ua.ObjectIds.AlarmConditionType,
    )
    # Emitted by the Server object, where clients subscribe for alarms (asyncua passes
    # an event only to subscribers of the node that emits it), about the pump.
    alarm = await server.get_event_generator(ua.ObjectIds.AlarmConditionType)
    event = alarm.event
    event.NodeId = condition.nodeid
    event.ConditionName = "HighPressure"
    event.SourceNode = pump.nodeid
    event.SourceName = "Pump01"
    event.InputNode = pressure.nodeid
    event.Severity = 700

    async def condition_event(active: bool, message: str) -> None:
        event.ActiveState = ua.LocalizedText("Active" if active else "Inactive")
        setattr(event, "ActiveState/Id", active)
        event.AckedState = ua.LocalizedText("Unacknowledged")
        setattr(event, "AckedState/Id", False)
        event.Retain = active
        await alarm.trigger(message=message)

    async with server:
        print(f"ready opc.tcp://127.0.0.1:{port}/", flush=True)
        reader = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
        )
        while line := (await reader.readline()).decode().strip():
            words = line.split()
            if words[0] == "set":
                await pressure.write_value(ua.Variant(float(words[1]), ua.VariantType.Double))
            elif words[0] == "raise":
                await condition_event(True, "Discharge pressure high")
            elif words[0] == "clear":
                await condition_event(False, "Discharge pressure normal")
            elif words[0] == "quit":
                break
            else:
                print(f"unknown {line}", flush=True)
                continue
            print(f"ok {line}", flush=True)
        # stdin ended (a demo in the background) or quit: serve until killed, or stop.
        if line != "quit":
            await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
