/**
 * Our driver of the stock AudioHook reference client library (createClientSession from
 * app/audiohook/src/client), copied by setup.sh into the client's src/ so that it uses the
 * client's own WebSocket factory (clientwebsocket.ts, which signs requests) and tone source.
 *
 *   ts-node --transpile-only src/ours-run.ts <uri> <monitor|stream> [apiKey] [clientSecretBase64]
 *
 * It runs one session: open, ping, pause, resume, update (language), close. Exit 0 when the
 * library received `closed` (closedMsg) and never had to send an `error`; the last stdout line is
 * a JSON summary either way.
 *
 * The library is monitor-side: any binary frame makes it answer `error` 415 and close. The bot on
 * /contactcenter/stream speaks (its greeting is binary PCMU), so in `stream` mode this harness
 * wraps the WebSocket's `message` listener and drops (counts) binary frames before the library
 * sees them. That is our code; the library's is untouched. In `monitor` mode nothing is dropped:
 * a single binary frame from the monitor fails the run.
 */
import { v4 as uuid } from 'uuid';
import {
    ClientWebSocket,
    ClientWebSocketFactory,
    Logger,
    StreamDuration,
    createClientSession,
} from '../../app/audiohook';
import { createClientWebSocket } from './clientwebsocket';
import { createToneMediaSource } from './mediasource-tone';

const [uri, mode, apiKey = 'unused', secret = ''] = process.argv.slice(2);
if (!uri || (mode !== 'monitor' && mode !== 'stream')) {
    console.error('usage: ours-run.ts <uri> <monitor|stream> [apiKey] [clientSecretBase64]');
    process.exit(2);
}

const log = (level: string) => (msg: string) => console.error(`[${level}] ${msg}`);
const logger: Logger = {
    fatal: log('fatal'), error: log('error'), warn: log('warn'),
    info: log('info'), debug: () => undefined, trace: () => undefined,
};

const summary = {
    mode,
    steps: [] as string[],
    received: [] as string[],   // server text message types, in order
    sent: [] as string[],       // client text message types, in order
    binaryReceived: 0,
    binaryDropped: 0,
    media: null as unknown,
    supportedLanguages: null as unknown,
    closed: false,
    failure: '',
};

const watch = (ws: ClientWebSocket): ClientWebSocket => {
    const raw = ws as unknown as {
        on: (event: string, listener: (...args: unknown[]) => void) => unknown;
        send: (data: string | Uint8Array) => void;
    };
    const on = raw.on.bind(raw);
    raw.on = (event, listener) => {
        if (event !== 'message') {
            return on(event, listener);
        }
        return on('message', (data: unknown, isBinary: unknown) => {
            if (isBinary) {
                summary.binaryReceived++;
                if (mode === 'stream') {
                    summary.binaryDropped++;
                    return;  // the bot's audio: not for the monitor-side library
                }
            } else {
                try {
                    summary.received.push(JSON.parse(Buffer.from(data as Uint8Array).toString('utf8')).type);
                } catch {
                    summary.received.push('<not json>');
                }
            }
            listener.call(ws, data, isBinary);
        });
    };
    const send = raw.send.bind(raw);
    raw.send = (data) => {
        if (typeof data === 'string') {
            summary.sent.push(JSON.parse(data).type);
        }
        send(data);
    };
    return ws;
};

const createWebSocket: ClientWebSocketFactory = (options) => watch(createClientWebSocket(options));

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const until = async (what: string, predicate: () => boolean, timeoutMs = 10000) => {
    const end = Date.now() + timeoutMs;
    while (!predicate()) {
        if (Date.now() > end) {
            throw new Error(`timed out waiting for ${what}`);
        }
        await sleep(20);
    }
    summary.steps.push(what);
};
const count = (type: string) => summary.received.filter((t) => t === type).length;

const main = async () => {
    const session = createClientSession({
        uri,
        mediaSource: createToneMediaSource(StreamDuration.fromSeconds(120)),
        organizationId: uuid(),
        createWebSocket,
        authInfo: { apiKey, clientSecret: secret ? Buffer.from(secret, 'base64') : null },
        logger,
        languageParam: 'en-US',
        supportedLanguages: true,
        initialPingDelay: 60000,  // no ping of its own: ours is the first
        pingInterval: 60000,
    });
    let pongs = 0;
    session.on('rttInfo', () => { pongs++; });
    const pending = () => (session as unknown as { pendingPing: unknown }).pendingPing;

    await until('opened', () => session.state === 'OPEN' && session.openedMsg !== undefined);
    summary.media = session.openedMsg?.parameters.media;
    summary.supportedLanguages = session.openedMsg?.parameters.supportedLanguages ?? null;
    await session.pinging();
    // the library answers its first pong with a second ping at once (its RTT probe): wait for both
    await until('pong', () => pongs >= 1 && pending() === null);
    await sleep(300);
    await until('pong settled', () => pending() === null);
    await session.pausing();
    await sleep(500);
    summary.steps.push('paused');
    await session.resuming('PT0S', 'PT0S');
    await until('resumed', () => summary.sent.includes('resumed'));
    await session.updating('en-US');
    await until('updated', () => count('updated') >= 1);
    await session.close();
    summary.closed = session.closedMsg !== undefined;
    summary.steps.push('closed');
    if (summary.sent.includes('error')) {
        throw new Error('the library sent an error message');
    }
    if (!summary.closed) {
        throw new Error(`no closed message (state ${session.state})`);
    }
    if (mode === 'monitor' && summary.binaryReceived > 0) {
        throw new Error(`the monitor sent ${summary.binaryReceived} binary frames`);
    }
};

const guard = setTimeout(() => {
    summary.failure = 'the run took more than 45 s';
    console.log(JSON.stringify(summary));
    process.exit(1);
}, 45000);

main().then(() => {
    clearTimeout(guard);
    console.log(JSON.stringify(summary));
    process.exit(0);
}).catch((err: Error) => {
    clearTimeout(guard);
    summary.failure = err.message;
    console.log(JSON.stringify(summary));
    process.exit(1);
});
