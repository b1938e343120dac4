/** The part of @xmpp/client and @xmpp/xml (which ship no types) that test/support/prosody.ts uses. */
declare module "@xmpp/xml" {
  export class Element {
    name: string;
    attrs: Record<string, string>;
    children: Array<Element | string>;
    getChild(name: string, xmlns?: string): Element | undefined;
    getChildren(name: string, xmlns?: string): Element[];
    getChildText(name: string, xmlns?: string): string | null;
    toString(): string;
  }
  export class Parser {
    write(data: string): void;
    on(event: "start" | "element" | "end", handler: (element: Element) => void): void;
    on(event: "error", handler: (error: Error) => void): void;
  }
  export function xml(
    name: string,
    attrs?: Record<string, string | undefined>,
    ...children: Array<Element | string | undefined>
  ): Element;
}

declare module "@xmpp/client" {
  import type { Element } from "@xmpp/xml";
  export { xml } from "@xmpp/xml";
  export interface XmppClient {
    jid?: { toString(): string };
    start(): Promise<unknown>;
    stop(): Promise<unknown>;
    send(element: Element): Promise<void>;
    on(event: "stanza", handler: (stanza: Element) => void): void;
    on(event: string, handler: (...args: unknown[]) => void): void;
    once(event: string, handler: (...args: unknown[]) => void): void;
    off(event: string, handler: (...args: never[]) => void): void;
  }
  export function client(options: {
    service: string;
    domain?: string;
    username?: string;
    password?: string;
    resource?: string;
  }): XmppClient;
}
