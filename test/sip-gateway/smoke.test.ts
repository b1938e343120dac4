import { expect, test } from "bun:test";
import { runSipp } from "../support/sipp";
import { startTestGateway } from "../support/sip-gateway";
import { newAccount } from "../helpers";
import { callsById } from "../../sip-gateway/calls";

test("smoke", async () => {
  const account = await newAccount();
  const gw = await startTestGateway({ accountId: account.accountId });
  const run = await runSipp({ scenario: "call.xml", port: gw.port, service: "gateway", keys: { extra_header: "Parley-Conference-Room: Lobby@conference.example.com" } });
  console.log(run.code, run.output.slice(-1500), run.errors);
  await Bun.sleep(300);
  console.log(await callsById(run.callId));
  await gw.stop();
});
