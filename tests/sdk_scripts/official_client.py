"""Drives `firstgate serve` with Dify's official Python SDK, dify-client 0.1.10,
unchanged (its base URL is an attribute, pointed at the server under test).

    official_client.py SCENARIO BASE_URL KEY

prints one JSON line with what the scenario saw."""

import io
import json
import sys
import time

from dify_client import ChatClient, CompletionClient, DifyClient

scenario, base, key = sys.argv[1:4]
USER = "official-user"


def _client(kind):
    client = kind(key)
    client.base_url = base + "/v1"
    return client


def _events(response):
    response.raise_for_status()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    for line in response.iter_lines(decode_unicode=True):
        if line and line.startswith("data:"):
            yield json.loads(line[5:])


def parameters():
    reply = _client(DifyClient).get_application_parameters(USER)
    reply.raise_for_status()
    return reply.json()


def chat_turns():
    client = _client(ChatClient)
    conversation = None
    answers = []
    for turn in range(3):
        if turn == 1:
            events = list(
                _events(
                    client.create_chat_message({}, "[count] again", USER, "streaming", conversation)
                )
            )
            answers.append("".join(e["answer"] for e in events if e["event"] == "message"))
            assert events[-1]["event"] == "message_end", events[-1]
        else:
            reply = client.create_chat_message({}, "[count] again", USER, "blocking", conversation)
            reply.raise_for_status()
            body = reply.json()
            conversation = body["conversation_id"]
            answers.append(body["answer"])
    messages = client.get_conversation_messages(USER, conversation).json()
    conversations = client.get_conversations(USER).json()
    return {
        "answers": answers,
        "conversation_id": conversation,
        "messages": [(m["query"], m["answer"]) for m in messages["data"]],
        "conversations": [c["id"] for c in conversations["data"]],
    }


def workflow_runs():
    # dify-client 0.1.10 has no workflow method: its own request helper reaches the endpoint.
    client = _client(DifyClient)
    blocking = client._send_request(
        "POST",
        "/workflows/run",
        {"inputs": {"topic": "a red fox"}, "response_mode": "blocking", "user": USER},
    )
    blocking.raise_for_status()
    streamed = list(
        _events(
            client._send_request(
                "POST",
                "/workflows/run",
                {"inputs": {"topic": "a grey heron"}, "response_mode": "streaming", "user": USER},
                stream=True,
            )
        )
    )
    return {
        "blocking": blocking.json()["data"]["outputs"],
        "streamed_text": "".join(e["data"]["text"] for e in streamed if e["event"] == "text_chunk"),
        "last": streamed[-1]["event"],
    }


def chat_stop():
    client = _client(ChatClient)
    response = client.create_chat_message({}, "[slow] go on", USER, "streaming")
    events = []
    stop_sent = None
    for event in _events(response):
        events.append(event)
        if stop_sent is None and event["event"] == "message":
            stop_sent = time.monotonic()
            reply = client._send_request(
                "POST", f"/chat-messages/{event['task_id']}/stop", {"user": USER}
            )
            assert reply.json() == {"result": "success"}, reply.text
    return {
        "tail": [e["event"] for e in events[-3:]],
        "status": [e["data"]["status"] for e in events if e["event"] == "workflow_finished"],
        "stop_to_end_s": time.monotonic() - stop_sent,
    }


def upload_and_run():
    client = _client(DifyClient)
    upload = client.file_upload(
        USER, {"file": ("notes.txt", io.BytesIO(b"remember the eggs\n"), "text/plain")}
    )
    assert upload.status_code == 201, upload.text
    record = upload.json()
    run = client._send_request(
        "POST",
        "/workflows/run",
        {
            "inputs": {
                "topic": "files",
                "doc": {
                    "type": "document",
                    "transfer_method": "local_file",
                    "upload_file_id": record["id"],
                },
            },
            "response_mode": "blocking",
            "user": USER,
        },
    )
    return {"upload": record, "run": run.json()}


def feedback_and_rename():
    client = _client(ChatClient)
    reply = client.create_chat_message({}, "rate this", USER, "blocking")
    reply.raise_for_status()
    body = reply.json()
    feedback = client.message_feedback(body["message_id"], "like", USER)
    feedback.raise_for_status()
    renamed = client.rename_conversation(body["conversation_id"], "Renamed by the SDK", USER)
    renamed.raise_for_status()
    other = client.message_feedback(body["message_id"], "like", "someone-else")
    return {
        "feedback": feedback.json(),
        "renamed": renamed.json(),
        "other_user_feedback": other.status_code,
    }


def agent_chat():
    client = _client(ChatClient)
    response = client.create_chat_message({}, "What time is it, and the files?", USER, "streaming")
    events = list(_events(response))
    refused = client.create_chat_message({}, "again", USER, "blocking")
    return {
        "events": events,
        "blocking": {"status": refused.status_code, "code": refused.json()["code"]},
    }


def easy_chat():
    client = _client(ChatClient)
    inputs = {"name": "Ada", "season": "winter"}
    response = client.create_chat_message(
        inputs, "Which mug survives the dishwasher?", USER, "streaming"
    )
    events = list(_events(response))
    blocking = client.create_chat_message(
        inputs, "Which mug survives the dishwasher?", USER, "blocking"
    )
    blocking.raise_for_status()
    return {"events": events, "blocking": blocking.json()}


def agent_messages():
    client = _client(ChatClient)
    events = list(_events(client.create_chat_message({}, "What time is it?", USER, "streaming")))
    conversation = events[-1]["conversation_id"]
    listed = client.get_conversation_messages(USER, conversation)
    listed.raise_for_status()
    (found,) = listed.json()["data"]
    thoughts = found["agent_thoughts"]
    return {"positions": [t["position"] for t in thoughts], "tools": [t["tool"] for t in thoughts]}


def completion():
    client = _client(CompletionClient)
    reply = client.create_completion_message({"product": "blue mug", "words": 20}, "blocking", USER)
    reply.raise_for_status()
    events = []
    stream = client.create_completion_message({"product": "[slow] mug"}, "streaming", USER)
    for event in _events(stream):
        events.append(event)
        if len(events) == 1:
            stop = client._send_request(
                "POST", f"/completion-messages/{event['task_id']}/stop", {"user": USER}
            )
            assert stop.json() == {"result": "success"}
    return {"answer": reply.json()["answer"], "events": [e["event"] for e in events]}


print(json.dumps(globals()[scenario](), default=str))
