"""The bootstrap server over DTLS (issue 28 #6): a Bootstrap-Request for `ep` is answered only for the DTLS identity
named `ep` in the account of `ep`'s configuration (4.03 otherwise, and nothing written); a session ends with the
DTLS session that asked. The simulator is the device, on its own DTLS client, over real UDP sockets."""

from __future__ import annotations

from pathlib import Path

from devicehub._core import CoapMessage
from devicehub.clock import SystemClock
from devicehub.domain.model import BootstrapConfig
from devicehub.domain.usage import BOOTSTRAPS_PENDING, HOUR, UsageMeter, UsageRow
from devicehub.lwm2m import codes
from devicehub.lwm2m.bootstrap import BootstrapServer
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.dtls import server_certificate
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.security import ClientCredentials, Keyring
from devicehub.sim.bootstrap import BootstrapClient, BootstrapError
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import Model
from support.device_pki import TestCa
from support.node import run
from support.waiting import eventually

ACCOUNT_A, ACCOUNT_B = "a" * 32, "b" * 32
DEVICE = "bootstrap-dtls-device-1"  # configured in account A
OTHER = "bootstrap-dtls-device-2"  # a device of account B
KEY_A, KEY_B, KEY_SQUAT = bytes(range(16)), bytes(range(16, 32)), bytes(range(32, 48))
WRITTEN_KEY = bytes(range(48, 64))


def configuration(name: str, account_id: str) -> BootstrapConfig:
    return BootstrapConfig(
        endpoint_name=name,
        account_id=account_id,
        server_uri="coaps://127.0.0.1:5684",
        security_mode=0,
        public_identity=name.encode(),
        secret_key=WRITTEN_KEY,
        created_at=0.0,
        updated_at=0.0,
    )


async def bootstrap_server(tmp_path: Path, keyring: Keyring) -> BootstrapServer:
    configs = {DEVICE: configuration(DEVICE, ACCOUNT_A)}

    async def lookup(name: str, remote: Address) -> BootstrapConfig | None:
        return configs.get(name)

    server = BootstrapServer(lookup, SystemClock(), allow_nosec=False)
    await server.start_secure(
        "127.0.0.1", 0, server_certificate(tmp_path / "c.pem", tmp_path / "c.key", create=True), handshake_timeout=5
    )
    assert server.dtls is not None
    server.dtls.load(keyring)
    return server


def device(
    server: BootstrapServer,
    name: str,
    identity: str = "",
    key: bytes = b"",
    certificate: ClientCredentials | None = None,
) -> SimDevice:
    assert server.dtls is not None
    port = server.dtls.address[1]
    sim = SimDevice(SystemClock(), ("127.0.0.1", 9), name, flavor=OMA)
    credentials = certificate or ClientCredentials(psk_identity=identity, psk_key=key)
    sim.bootstrap = BootstrapClient(sim.model, sim.clock, name, f"coaps://127.0.0.1:{port}", credentials)
    return sim


def security_instances(model: Model) -> list[int]:
    """The /0 instances beside the device's own bootstrap account (0): what a bootstrap wrote."""
    return sorted(iid for iid in model.objects.get(0, {}) if iid != 0)


def test_the_identity_named_as_the_endpoint_in_its_configurations_account_is_bootstrapped(tmp_path: Path) -> None:
    async def main() -> None:
        server = await bootstrap_server(tmp_path, Keyring(psks={DEVICE: (KEY_A, ACCOUNT_A)}))
        sim = device(server, DEVICE, DEVICE, KEY_A)
        await sim.start(lifecycle=False)
        try:
            assert sim.bootstrap is not None
            provisioned = await sim._bootstrap_secure(sim.bootstrap)
            assert provisioned.server == ("127.0.0.1", 5684)
            assert provisioned.security == ClientCredentials(psk_identity=DEVICE, psk_key=WRITTEN_KEY)
            await eventually(lambda: DEVICE in server.outcomes)  # the server has the answer to its Finish
            assert server.outcomes[DEVICE] == "completed" and server.stats.forbidden == 0
        finally:
            await sim.stop(deregister=False)
            await server.stop()

    run(main())


def test_a_certificate_whose_cn_is_the_endpoint_from_a_ca_of_its_account_is_bootstrapped_and_given_a_psk(
    tmp_path: Path,
) -> None:
    """The identity rules of the LwM2M server: a certificate's CN, issued by a CA the account trusts, is a name of
    that account. The device bootstraps with its certificate and is given the configuration's PSK; the same CN
    from a CA of another account gets 4.03."""

    async def main() -> None:
        own, foreign = TestCa(tmp_path / "own", "Own CA"), TestCa(tmp_path / "foreign", "Foreign CA")
        keyring = Keyring(authorities=[("ca-a", ACCOUNT_A, own.certificate), ("ca-b", ACCOUNT_B, foreign.certificate)])
        server = await bootstrap_server(tmp_path, keyring)
        try:
            outcomes = []
            for ca in (own, foreign):
                issued = ca.issue(DEVICE)
                certificate = ClientCredentials(cert_file=str(issued.cert_file), key_file=str(issued.key_file))
                sim = device(server, DEVICE, certificate=certificate)
                await sim.start(lifecycle=False)
                try:
                    assert sim.bootstrap is not None
                    try:
                        provisioned = await sim._bootstrap_secure(sim.bootstrap)
                        outcomes.append(provisioned.security)
                    except BootstrapError as refused:
                        outcomes.append(str(refused))
                finally:
                    await sim.stop(deregister=False)
            assert outcomes == [
                ClientCredentials(psk_identity=DEVICE, psk_key=WRITTEN_KEY),
                "Bootstrap-Request answered 4.03",
            ]
            await eventually(lambda: server.outcomes.get(DEVICE) == "completed")
            assert server.stats.forbidden == 1
        finally:
            await server.stop()

    run(main())


def test_an_identity_of_another_name_or_another_account_gets_4_03_and_no_security_object(tmp_path: Path) -> None:
    """B's device asks for A's endpoint name; then a PSK identity named as A's endpoint but held by account B (a
    squatted name) asks for it: both 4.03 with one answer (no hint whether a configuration exists), nothing
    written."""

    async def main() -> None:
        keyring = Keyring(psks={OTHER: (KEY_B, ACCOUNT_B), DEVICE: (KEY_SQUAT, ACCOUNT_B)})
        server = await bootstrap_server(tmp_path, keyring)
        try:
            for identity, key in ((OTHER, KEY_B), (DEVICE, KEY_SQUAT)):
                sim = device(server, DEVICE, identity, key)
                await sim.start(lifecycle=False)
                try:
                    assert sim.bootstrap is not None
                    try:
                        await sim._bootstrap_secure(sim.bootstrap)
                        raise AssertionError("bootstrapped with a foreign identity")
                    except BootstrapError as refused:
                        assert "4.03" in str(refused)
                    assert security_instances(sim.model) == [] and sim.bootstrap.requests == []
                finally:
                    await sim.stop(deregister=False)
            assert server.stats.forbidden == 2 and DEVICE not in server.outcomes
        finally:
            await server.stop()

    run(main())


def test_the_4_03_answer_is_the_same_for_a_missing_and_a_foreign_configuration(tmp_path: Path) -> None:
    async def main() -> None:
        keyring = Keyring(psks={DEVICE: (KEY_SQUAT, ACCOUNT_B), OTHER: (KEY_B, ACCOUNT_B)})
        server = await bootstrap_server(tmp_path, keyring)
        assert server.dtls is not None
        answers = []
        try:
            for name, key in ((DEVICE, KEY_SQUAT), (OTHER, KEY_B)):  # A's configuration; no configuration at all
                endpoint = CoapEndpoint(SystemClock(), nothing)
                client = await DtlsClient.connect(
                    "127.0.0.1", SystemClock(), endpoint, server.dtls.address, ClientCredentials(name, key)
                )
                try:
                    options = [(codes.URI_PATH, b"bs"), (codes.URI_QUERY, f"ep={name}".encode())]
                    answer = await endpoint.request(server.dtls.address, codes.POST, options)
                    answers.append((answer.code, answer.payload))
                finally:
                    await endpoint.close()
                    client.close()
            assert answers == [(codes.FORBIDDEN, b"no bootstrap configuration for this identity")] * 2
        finally:
            await server.stop()

    run(main())


def test_a_bootstrap_session_ends_with_the_dtls_session_that_asked(tmp_path: Path) -> None:
    """The device answers 2.04 and closes its DTLS session: the session's Bootstrap-Discover is not answered, and
    the server gives up at once (not after the exchange's time-out) without sending the keys anywhere. While it
    runs it is a pending bootstrap of its account (issue 32 #3), taken off the hour it started when it ends."""

    async def main() -> None:
        server = await bootstrap_server(tmp_path, Keyring(psks={DEVICE: (KEY_A, ACCOUNT_A)}))
        assert server.dtls is not None
        server.usage = usage = UsageMeter(SystemClock())
        heard: list[int] = []

        async def silent(message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
            heard.append(message.code)
            return None  # no answer: the server's request waits

        endpoint = CoapEndpoint(SystemClock(), silent)
        client = await DtlsClient.connect(
            "127.0.0.1", SystemClock(), endpoint, server.dtls.address, ClientCredentials(DEVICE, KEY_A)
        )
        try:
            options = [(codes.URI_PATH, b"bs"), (codes.URI_QUERY, f"ep={DEVICE}".encode())]
            answer = await endpoint.request(server.dtls.address, codes.POST, options)
            assert answer.code == codes.CHANGED
            await eventually(lambda: bool(heard))  # the Bootstrap-Discover came
            [(account, hour, metric, pending)] = usage.take()
            assert (account, metric, pending) == (ACCOUNT_A, BOOTSTRAPS_PENDING, 1) and hour % HOUR == 0
            client.close_session()  # close_notify
            # well within the exchange's time-out (MAX_TRANSMIT_WAIT, 93 s)
            await eventually(lambda: DEVICE in server.outcomes)
            ended: list[UsageRow] = []
            await eventually(lambda: bool(ended.extend(usage.take()) or ended))
            assert ended == [(ACCOUNT_A, hour, BOOTSTRAPS_PENDING, -1)]  # the session's hour, whenever it ends
            assert server.outcomes[DEVICE] == "failed: the DTLS session that asked has ended"
            assert heard == [codes.GET] and server.stats.failed == 1
        finally:
            await endpoint.close()
            client.close()
            await server.stop()

    run(main())


async def nothing(*_: object) -> Reply | None:
    return None
